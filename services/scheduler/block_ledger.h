// Paged KV-cache block accounting for the scheduler: one block table per
// sequence, the same table valid on every pipeline stage (each stage keeps
// its own layers' caches, latent rows and indexer keys alike, in the same
// block ids), a leak check, and automatic prefix caching.
//
// Prefix caching (vLLM's design, docs/architecture.md): a full 64-token
// block whose rows every stage has computed gets a content key, a chained
// hash of its tokens and everything before them (block_hash.h); a sequence
// admitted later whose leading full blocks have those keys shares the
// blocks instead of computing them, and its first micro-batch starts after
// them. Blocks are reference counted; a block no table holds keeps its
// content until it is needed again (least recently used first).
// The rule that keeps sharing safe: a sequence writes only positions at or
// beyond its own computed length, and only full blocks below it are ever
// keyed or shared, so no sequence writes a block another one reads. A
// sequence's last prompt token is always computed (its logits are needed),
// so a hit never covers the whole prompt; a partial block is never keyed.
// Blocks get their keys only when a micro-batch's result is back (every
// stage wrote them), so a hit never reads rows still being written, and a
// micro-batch that failed or was cancelled leaves nothing in the cache.
// TrimTail (speculative decoding's rejected drafts) keeps the rule: a
// shared block the new end falls inside is given back, not rewritten
// (copy-on-write by recompute: the caller recomputes from its start).
// Speculative decoding writes past the computed length only (the drafts a
// step verifies, the positions the MTP layer's drafting writes), into
// blocks the sequence holds alone and that carry no key (CheckWritable);
// only accepted tokens ever count towards the computed length the caller
// commits. With the MTP layer a block's rows also depend on the token after
// it (the layer's row at a position reads the next token), so that token
// is part of the block's key (PrefixCacheOptions::lookahead_tokens).
//
// Pure and thread-compatible: no clock, no I/O.
#ifndef SPAR_SERVICES_SCHEDULER_BLOCK_LEDGER_H_
#define SPAR_SERVICES_SCHEDULER_BLOCK_LEDGER_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/scheduler/block_hash.h"
#include "services/scheduler/block_pool.h"

namespace spar {

struct PrefixCacheOptions {
  bool enabled = false;
  // Everything besides the tokens that decides what a block holds: the
  // model, the stages' cache formats (the root of every key chain).
  std::string salt;
  // Tokens after a block that its rows depend on too: 1 where the last
  // stage runs the MTP layer (speculative decoding: the layer's cache row
  // at position p reads the token at p + 1, so a block's last row depends
  // on the next block's first token), 0 otherwise. A block is keyed with
  // them, and only once they are known.
  int lookahead_tokens = 0;
};

struct PrefixCacheStats {
  uint64_t queries = 0;  // tokens of admitted sequences looked up (vllm:prefix_cache_queries)
  uint64_t hits = 0;     // of them, shared from the cache (vllm:prefix_cache_hits)
  uint64_t evictions = 0;
  int64_t cached_blocks = 0;  // blocks with a content key now, held or not
};

class BlockLedger {
 public:
  explicit BlockLedger(int64_t num_blocks, PrefixCacheOptions prefix = {});

  int64_t num_blocks() const { return pool_.num_blocks(); }
  // Free includes cached blocks no table holds (they are evicted on demand).
  int64_t num_free() const { return pool_.num_free(); }
  int64_t num_used() const { return pool_.num_used(); }
  size_t num_sequences() const { return holding_; }
  bool prefix_caching() const { return prefix_.enabled; }

  // Blocks a table must hold to cover `tokens` positions.
  static int64_t BlocksFor(int64_t tokens);
  // Additional blocks `seq` needs to cover `tokens` positions.
  int64_t Shortfall(int64_t seq, int64_t tokens) const;
  bool CanGrow(int64_t seq, int64_t tokens) const { return Shortfall(seq, tokens) <= num_free(); }

  // Grows the table of `seq` to cover `tokens` positions with new blocks.
  // RESOURCE_EXHAUSTED (nothing changed) when too few blocks are free.
  absl::Status Grow(int64_t seq, int64_t tokens);
  // Admits `seq` (holding no blocks) whose tokens are `tokens`: with prefix
  // caching its longest run of leading full blocks found in the cache is
  // shared (at most tokens.size() - 1 tokens: the last one is computed),
  // then new blocks cover up to `max_new` more tokens (all the rest at
  // most), and a chunk that reaches the last token `drafting` positions
  // after it (speculative decoding: the MTP layer's drafting writes them).
  // Returns the tokens shared, a multiple of 64 (0 without prefix caching).
  // All or nothing: RESOURCE_EXHAUSTED when the new blocks do not fit.
  // Counts the query and its hit.
  absl::StatusOr<int32_t> Admit(int64_t seq, absl::Span<const int32_t> tokens, int64_t max_new,
                                int64_t drafting = 0);
  // The positions [0, computed) of `seq`, whose tokens are `tokens`, are in
  // every stage's cache: its full blocks among them get their content keys
  // (with lookahead tokens: those whose next tokens `tokens` holds). A
  // block whose content another block already has stays private.
  void Commit(int64_t seq, absl::Span<const int32_t> tokens, int64_t computed);
  // Drops the positions from `tokens` on of `seq` (speculative decoding's
  // rejected drafts and the drafting's positions, after each verify step):
  // the blocks past the new end go back; the block the end falls inside is
  // kept when `seq` holds it alone (its key, if any, is forgotten: it will
  // be rewritten) and given back when shared. Returns how many leading
  // positions stay valid: `tokens`, or the start of that shared block, from
  // where the caller recomputes. The tokens before the returned length must
  // not change.
  int64_t TrimTail(int64_t seq, int64_t tokens);

  // The table of `seq` (empty if it holds none).
  const std::vector<int32_t>& Table(int64_t seq) const;
  int64_t BlocksOf(int64_t seq) const { return static_cast<int64_t>(Table(seq).size()); }
  // Blocks that freeing `seq` gives back: those no other table holds.
  int64_t BlocksFreedBy(int64_t seq) const;
  // Gives back every block of `seq` (a sequence without blocks is fine);
  // its cached ones stay reusable (a preempted sequence may hit them when
  // it comes back). Tail blocks are released first, so they are evicted
  // before the prefix others are likelier to share.
  absl::Status Free(int64_t seq);
  // Free(), and forgets the sequence (it is gone for good).
  absl::Status Forget(int64_t seq);
  // Forgets every content key: the stages' caches were lost. Blocks already
  // shared stay shared (and are never keyed again).
  void DropCachedContent();

  PrefixCacheStats prefix_stats() const;
  // Every block is free, evictable, or held by as many tables as its count
  // says (a table holds a block once), a block past a table's committed
  // ones is held by that table alone and has no key, and the structures
  // agree.
  absl::Status CheckConsistency() const;
  // A step of `seq` may write the positions [from, to): the table covers
  // them, and every block they fall in is held by `seq` alone and has no
  // content key (no other sequence reads it, no later hit expects it).
  absl::Status CheckWritable(int64_t seq, int64_t from, int64_t to) const;

 private:
  struct SeqBlocks {
    std::vector<int32_t> table;
    std::vector<BlockHash> keys;  // content keys of its leading full blocks, by tokens (a memo)
    int64_t committed = 0;        // leading blocks whose rows are final (shared or keyed)
  };
  // Leading full blocks of a sequence of `tokens` tokens that can be keyed
  // (the lookahead tokens after each must be known).
  int64_t KeyableBlocks(int64_t tokens) const;
  // Extends the memo of `s` to its first `blocks` full blocks.
  void EnsureKeys(SeqBlocks& s, absl::Span<const int32_t> tokens, int64_t blocks) const;
  absl::Status ReleaseTable(SeqBlocks& s);

  PrefixCacheOptions prefix_;
  BlockHash root_;
  BlockPool pool_;
  std::unordered_map<int64_t, SeqBlocks> seqs_;
  size_t holding_ = 0;  // sequences with a non-empty table
  uint64_t queries_ = 0, hits_ = 0;
};

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_BLOCK_LEDGER_H_
