// A tensor-parallel rank that loses its peer must not hang: the step blocked
// in an NCCL all-reduce returns once the group is aborted, the backend tears
// down (NCCL frees an aborted communicator only after the CUDA graphs that
// captured its collectives are gone — the hang this test was written for),
// and the same process forms a new group with a new peer that computes what
// the first group did.
//
// Processes (this binary re-executed, one GPU each): the survivor (rank 0 on
// GPU 0) and three peers in turn (rank 1 on GPU 1). The first two run the
// survivor's generation with decode graphs and then die without any
// teardown, as a killed process does. The survivor rejoins a new group with
// the second keeping its weights (Backend::RejoinGroup, what the worker does
// when the same shard re-forms), and after losing that one too it tears its
// engine down and builds a new one with the third.
// Rank 0 hands its NCCL ids over files, standing in for the control plane.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "base/rng.h"
#include "engine/engine.h"
#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "tests/engine/test_util.h"
#include "tests/kernels/gpu_test_util.h"

extern char** environ;

namespace spar {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<GenerationRequest> Requests() {
  std::vector<GenerationRequest> requests;
  for (int n : {9, 70}) {  // below and above the tiny model's index_topk
    Rng rng(n);
    GenerationRequest r;
    for (int i = 0; i < n; ++i) r.prompt.push_back(static_cast<int32_t>(rng.Below(288)));
    r.sampling.temperature = 0;
    r.max_tokens = 16;  // decode steps: captured and replayed as graphs
    r.ignore_eos = true;
    requests.push_back(std::move(r));
  }
  return requests;
}

std::string TokensOf(const std::vector<Generation>& gen) {
  std::string s;
  for (const auto& g : gen) {
    for (const auto& t : g.tokens) s += std::to_string(t.id) + ",";
    s += ";";
  }
  return s;
}

bool WaitForFile(const std::string& path, double seconds) {
  const auto start = Clock::now();
  while (SecondsSince(start) < seconds) {
    if (std::ifstream(path).good()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path + ".tmp", std::ios::binary) << bytes;
  std::rename((path + ".tmp").c_str(), path.c_str());
}

absl::StatusOr<std::unique_ptr<Engine>> CreateRank(const std::string& model, int rank, const std::string& id) {
  EngineOptions eo;
  eo.backend = "cuda";
  eo.model.num_blocks = 64;
  eo.backend_options.device = rank;
  eo.backend_options.tp = TpRank{rank, 2};
  eo.backend_options.nccl_unique_id = id;
  return Engine::Create(model, eo);
}

// Rank 1: joins the group whose id appears in id_file, generates, and then
// either dies on the spot (`die`: no destructor, no NCCL teardown) or exits.
int RunVictim(const std::string& model, const std::string& id_file, bool die) {
  if (!WaitForFile(id_file, 120)) return 2;
  std::ifstream in(id_file, std::ios::binary);
  const std::string id((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto engine = CreateRank(model, 1, id);
  if (!engine.ok()) {
    std::cerr << "victim: " << engine.status() << "\n";
    return 3;
  }
  auto gen = (*engine)->Generate(Requests());
  if (!gen.ok()) {
    std::cerr << "victim: " << gen.status() << "\n";
    return 4;
  }
  if (die) {
    // Let the survivor's last kernels finish reading this process's
    // buffers, then vanish as a killed process does.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    _exit(0);
  }
  return 0;
}

// Blocks in a step whose peer is gone until another thread aborts the
// group (what the worker does when the peer's membership stream ends);
// writes the outcome under `tag`.
void BlockedStepIsReleased(Engine* engine, const std::string& tag, std::ofstream& o) {
  Backend* backend = engine->model().backend();
  Clock::time_point aborted_at;
  std::thread watchdog([&] {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    aborted_at = Clock::now();
    backend->AbortCollectives();
  });
  const auto blocked = engine->Generate(Requests());
  const auto returned_at = Clock::now();
  watchdog.join();
  o << tag << "_blocked_step_ok " << blocked.ok() << "\n";
  o << tag << "_blocked_step_code " << static_cast<int>(blocked.status().code()) << "\n";
  o << tag << "_released_after_abort_s " << std::chrono::duration<double>(returned_at - aborted_at).count() << "\n";
}

// Rank 0, three groups: (1) with a peer that dies after generating; the
// step that then blocks is aborted; (2) the same engine rejoins a new group
// (weights kept) with a second peer, which also dies after generating;
// after the abort the engine is torn down; (3) a new engine in a new group
// with a third peer. Every group must generate the same tokens. Writes
// "key value" lines to `out`.
int RunSurvivor(const std::string& model, const std::string& dir, const std::string& out) {
  std::ofstream o(out);
  auto id1 = NewNcclGroupId();
  if (!id1.ok()) return 2;
  WriteFile(dir + "/id1", *id1);
  auto engine = CreateRank(model, 0, *id1);
  if (!engine.ok()) {
    std::cerr << "survivor: " << engine.status() << "\n";
    return 3;
  }
  auto first = (*engine)->Generate(Requests());
  if (!first.ok()) {
    std::cerr << "survivor: " << first.status() << "\n";
    return 4;
  }
  o << "graphs_captured " << (*engine)->model().backend()->graph_stats().captures << "\n" << std::flush;
  if (!WaitForFile(dir + "/victim1_gone", 120)) return 5;
  BlockedStepIsReleased(engine->get(), "group1", o);

  auto id2 = NewNcclGroupId();
  if (!id2.ok()) return 6;
  WriteFile(dir + "/id2", *id2);
  const auto rejoin = Clock::now();
  if (absl::Status s = (*engine)->model().backend()->RejoinGroup(Backend::TpRendezvous{*id2, nullptr}); !s.ok()) {
    std::cerr << "survivor, rejoin: " << s << "\n";
    return 7;
  }
  o << "rejoin_s " << SecondsSince(rejoin) << "\n";
  auto second = (*engine)->Generate(Requests());
  if (!second.ok()) {
    std::cerr << "survivor, rejoined group: " << second.status() << "\n";
    return 8;
  }
  o << "rejoined_same_tokens " << (TokensOf(*first) == TokensOf(*second)) << "\n";
  o << "rejoined_graphs_captured " << (*engine)->model().backend()->graph_stats().captures << "\n" << std::flush;
  if (!WaitForFile(dir + "/victim2_gone", 120)) return 9;
  BlockedStepIsReleased(engine->get(), "group2", o);
  const auto teardown = Clock::now();
  engine->reset();
  o << "teardown_s " << SecondsSince(teardown) << "\n" << std::flush;

  auto id3 = NewNcclGroupId();
  if (!id3.ok()) return 10;
  WriteFile(dir + "/id3", *id3);
  const auto reform = Clock::now();
  auto again = CreateRank(model, 0, *id3);
  if (!again.ok()) {
    std::cerr << "survivor, third group: " << again.status() << "\n";
    return 11;
  }
  o << "reload_s " << SecondsSince(reform) << "\n";
  auto third = (*again)->Generate(Requests());
  if (!third.ok()) {
    std::cerr << "survivor, third group: " << third.status() << "\n";
    return 12;
  }
  o << "reloaded_same_tokens " << (TokensOf(*first) == TokensOf(*third)) << "\n";
  return o.good() ? 0 : 13;
}

pid_t Spawn(const std::vector<std::string>& args) {
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}

// The exit code of pid, or -1 (and the process killed) after `seconds`.
int WaitExit(pid_t pid, double seconds) {
  const auto start = Clock::now();
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -2;
    if (SecondsSince(start) > seconds) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::map<std::string, std::string> ReadKeys(const std::string& path) {
  std::map<std::string, std::string> m;
  std::ifstream in(path);
  std::string key, value;
  while (in >> key >> value) m[key] = value;
  return m;
}

TEST(TpAbortGpuTest, LostPeerReleasesTheBlockedStepAndTheGroupReforms) {
  SPAR_REQUIRE_GPU();
  int gpus = 0;
  ASSERT_EQ(cudaGetDeviceCount(&gpus), cudaSuccess);
  if (gpus < 2) GTEST_SKIP() << "needs two GPUs (" << gpus << " visible)";
  MakeTinyOptions mo;
  mo.arch = ModelArch::kGlmMoeDsa;
  mo.seed = 11;
  mo.out_dir = testing::TempDir("tp_abort_gpu");
  ASSERT_TRUE(MakeTinyModel(mo).ok());
  const std::string dir = mo.out_dir, out = dir + "/survivor.txt";

  const pid_t survivor = Spawn({"/proc/self/exe", "--survivor", mo.out_dir, dir, out});
  ASSERT_GT(survivor, 0);
  // Peers 1 and 2 die on cue (after their generation); peer 3 lives.
  for (int peer = 1; peer <= 3; ++peer) {
    const std::string id = dir + "/id" + std::to_string(peer);
    const pid_t victim = Spawn({"/proc/self/exe", "--victim", mo.out_dir, id, peer < 3 ? "die" : "live"});
    ASSERT_GT(victim, 0);
    const int rc = WaitExit(victim, 150);
    EXPECT_EQ(rc, 0) << "peer " << peer << " failed (-1: killed after 150 s)";
    if (rc != 0) break;
    if (peer < 3) WriteFile(dir + "/victim" + std::to_string(peer) + "_gone", "1");
  }
  const int survivor_rc = WaitExit(survivor, 150);
  const auto keys = ReadKeys(out);
  for (const auto& [k, v] : keys) std::cout << "  " << k << " = " << v << "\n";
  ASSERT_NE(survivor_rc, -1) << "the surviving rank hung (killed after 150 s)";
  ASSERT_EQ(survivor_rc, 0);
  EXPECT_GT(std::stoi(keys.at("graphs_captured")), 0) << "no decode graph held the communicator";
  for (const char* group : {"group1", "group2"}) {
    const std::string g = group;
    EXPECT_EQ(keys.at(g + "_blocked_step_ok"), "0") << g << ": a step with the peer gone succeeded";
    EXPECT_LT(std::stod(keys.at(g + "_released_after_abort_s")), 10.0) << g;
  }
  EXPECT_EQ(keys.at("rejoined_same_tokens"), "1") << "the rejoined group computes something else";
  EXPECT_GT(std::stoi(keys.at("rejoined_graphs_captured")), std::stoi(keys.at("graphs_captured")))
      << "the rejoined group replayed no new decode graphs";
  EXPECT_LT(std::stod(keys.at("teardown_s")), 20.0);
  EXPECT_EQ(keys.at("reloaded_same_tokens"), "1") << "the re-formed group computes something else";
}

}  // namespace
}  // namespace spar

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--survivor") return spar::RunSurvivor(argv[2], argv[3], argv[4]);
  if (argc == 5 && std::string(argv[1]) == "--victim") {
    return spar::RunVictim(argv[2], argv[3], std::string(argv[4]) == "die");
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
