"""CUDA-event timing shared by the PyTorch peer scripts (bench/*/peer_*.py).

The peers are the baselines spar's benches are compared with in the same
device call, so they are timed the way the benches time spar's kernels: the
median over repetitions after warm-up, either as calls issued one by one from
Python (what an eager engine pays) or as CUDA-graph replays (GPU time without
host launch overhead, how an engine replays its decode step). The scripts
import it with bench/common on sys.path (see their first lines).
"""
import statistics

import torch


def median_us(fn, warmup=3, reps=7, per_rep=1):
    """Median µs per call of fn(): `warmup` untimed calls, then `reps`
    repetitions of `per_rep` back-to-back calls between two CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(per_rep):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / per_rep)
    return statistics.median(times)


def graph_median_us(fn, per_graph=10, warmup=3, reps=7):
    """Median µs per call of fn() captured `per_graph` times into one CUDA
    graph and replayed. The warm-up runs on a side stream, as torch requires
    before a capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(per_graph):
            fn()
    us = median_us(graph.replay, warmup=1, reps=reps) / per_graph
    del graph
    torch.cuda.synchronize()
    return us
