#include "server/scheduler.h"

#include <algorithm>
#include <set>

namespace graft::server {

namespace {

using Clock = std::chrono::steady_clock;

int64_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

JobEvent error_event(ErrorKind kind, const std::string& message) {
  JobEvent e;
  e.final = true;
  e.failed = true;
  e.error_kind = kind;
  e.error = message;
  return e;
}

}  // namespace

Scheduler::Scheduler(engine::Engine& engine, SchedulerOptions options) : engine_(engine), opts_(options) {
  slots_.resize(static_cast<size_t>(std::max(1, opts_.parallel)));
  for (auto& s : slots_) s.cache = std::make_unique<runtime::KVCache>(engine_.model().config, opts_.slot_ctx, opts_.cache_type);
  stats_.kv_capacity = opts_.slot_ctx * static_cast<int64_t>(slots_.size());
  stats_.kv_block_size = opts_.kv_block_size;
  if (opts_.kv_events) blocks_ = std::make_unique<KvBlockTracker>(slots_.size(), opts_.kv_block_size);
  thread_ = std::thread([this] { loop(); });
  loader_ = std::thread([this] { load_loop(); });
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::submit(std::shared_ptr<CompletionJob> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) fail_as(ErrorKind::kLimit, "the server is shutting down");
    if (queue_.size() >= opts_.queue_size)
      fail_as(ErrorKind::kLimit, "the request queue is full (", opts_.queue_size, " waiting beyond ", slots_.size(),
              " slots); retry later");
    job->adapters_ready = job->adapters.ready();
    if (!job->adapters_ready) to_load_.push_back(job);
    queue_.push_back(std::move(job));
    stats_.deferred = static_cast<int64_t>(queue_.size());
  }
  cv_.notify_all();
  load_cv_.notify_all();
}

void Scheduler::load_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    load_cv_.wait(lock, [&] { return stopping_ || !to_load_.empty(); });
    if (stopping_) return;
    std::shared_ptr<CompletionJob> job = to_load_.front();
    to_load_.pop_front();
    if (job->cancelled) continue;  // admit() answers it
    engine::Selection sel = job->adapters;  // built outside the lock, on a copy
    lock.unlock();
    std::string error;
    ErrorKind kind = ErrorKind::kInternal;
    try {
      engine_.adapters().make_resident(sel);
    } catch (const Error& e) {
      error = e.what();
      kind = e.kind();
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    if (error.empty()) {
      job->adapters = std::move(sel);
      job->adapters_ready = true;
    } else {
      auto it = std::find(queue_.begin(), queue_.end(), job);
      if (it != queue_.end()) queue_.erase(it);
      stats_.deferred = static_cast<int64_t>(queue_.size());
      job->push(error_event(kind, "loading adapter(s) " + [&] {
        std::string n;
        for (const auto& name : sel.names()) n += (n.empty() ? "'" : ", '") + name + "'";
        return n;
      }() + ": " + error));
    }
    cv_.notify_all();
  }
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  load_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (loader_.joinable()) loader_.join();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SchedulerStats s = stats_;
  std::set<std::string> running, waiting;
  for (const auto& slot : slots_)
    if (slot.job)
      for (const auto& p : slot.job->adapters.picks) running.insert(p.name);
  for (const auto& j : queue_) {
    for (const auto& p : j->adapters.picks) waiting.insert(p.name);
    if (!j->adapters_ready) ++s.waiting_for_adapter;
  }
  s.running_adapters.assign(running.begin(), running.end());
  s.waiting_adapters.assign(waiting.begin(), waiting.end());
  return s;
}

void Scheduler::adapters_changed() {
  const std::vector<engine::AdapterInfo> registered = engine_.adapters().list();
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(stats_.adapters, [&](const auto& kv) { return !engine_.adapters().contains(kv.first); });
  for (size_t i = 0; i < slots_.size(); ++i)
    if (!slots_[i].job) {
      drop_if_stale(slots_[i], registered);
      report_blocks(i);
    }
  flush_blocks();
}

void Scheduler::drop_if_stale(Slot& s, const std::vector<engine::AdapterInfo>& registered) {
  for (const auto& [id, content] : s.contents) {
    const auto it = std::find_if(registered.begin(), registered.end(), [&](const auto& a) { return a.id == id; });
    if (it == registered.end() || it->content_digest != content) {
      // Its adapter is gone or other bytes now: no request can reuse this KV, and a router must
      // not send one here for it (its blocks are removed; a reload's are new blocks).
      s.cache->truncate(0);
      s.cached.clear();
      s.contents.clear();
      return;
    }
  }
}

void Scheduler::report_blocks(size_t i) {
  if (blocks_) blocks_->sync(i, held_tokens(slots_[i]), slots_[i].digest, slots_[i].lora, pending_);
}

void Scheduler::flush_blocks() {
  if (pending_.empty()) return;
  opts_.kv_events->publish(pending_);
  pending_.clear();
}

std::vector<int32_t> Scheduler::held_tokens(const Slot& s) {
  if (!s.seq) return s.cached;
  std::vector<int32_t> t = s.seq->prompt();  // a running slot: its history, as far as evaluated
  t.insert(t.end(), s.seq->generated().begin(), s.seq->generated().end());
  t.resize(static_cast<size_t>(std::min<int64_t>(s.cache->size(), static_cast<int64_t>(t.size()))));
  return t;
}

bool Scheduler::waits_for_leader(const CompletionJob& job) const {
  if (!job.leader) return false;
  if (std::find(queue_.begin(), queue_.end(), job.leader) != queue_.end()) return true;
  const int64_t want = static_cast<int64_t>(job.leader->prompt.size()) - 1;
  for (const Slot& s : slots_)
    if (s.job == job.leader) return s.cache->size() < want;  // its prompt is being evaluated
  return false;  // finished (or failed): whatever its slot still holds is found in start()
}

void Scheduler::start(size_t i, std::shared_ptr<CompletionJob> job) {
  Slot& s = slots_[i];
  const int64_t cap = static_cast<int64_t>(job->prompt.size()) - 1;
  int64_t reuse = 0;
  // An embedding needs every prompt token's hidden state: it evaluates from 0 (its KV is kept
  // afterwards, so a completion with the same prefix and adapters reuses it).
  if (job->cache_prompt && !job->params.embedding && s.digest == job->adapters.digest)
    reuse = std::min<int64_t>(common_prefix(s.cached, job->prompt), cap);
  reuse = std::max<int64_t>(0, reuse);
  if (job->leader || (job->cache_prompt && !job->params.embedding)) {
    // The longest prefix any slot holds under the same adapters (running or finished; for a choice
    // after the first, its leader's), copied into this slot when longer than its own: a new
    // conversation sharing a system prompt starts from it without overwriting the slot that has it.
    int64_t from = -1, len = reuse;
    for (size_t k = 0; k < slots_.size(); ++k) {
      if (k == i || slots_[k].digest != job->adapters.digest) continue;
      const int64_t l = std::min<int64_t>(common_prefix(held_tokens(slots_[k]), job->prompt), cap);
      if (l > len) {
        from = static_cast<int64_t>(k);
        len = l;
      }
    }
    if (from >= 0) {
      s.cache->copy_prefix(*slots_[static_cast<size_t>(from)].cache, len);
      s.cached.assign(job->prompt.begin(), job->prompt.begin() + len);
      reuse = len;
    }
  }
  s.cache->truncate(reuse);
  s.cached.resize(static_cast<size_t>(reuse));
  s.digest = job->adapters.digest;
  s.lora = lora_tag(job->adapters);
  s.contents.clear();
  for (const auto& p : job->adapters.picks) s.contents.emplace_back(p.id, p.digest);
  s.last_used = ++clock_;
  job->params.adapters = job->adapters.adapters();
  try {
    s.seq = std::make_unique<engine::Sequence>(engine_.tokenizer(), *s.cache, job->prompt, job->params);
  } catch (const Error& e) {
    job->push(error_event(e.kind(), e.what()));
    report_blocks(i);
    return;
  }
  for (const auto& p : job->adapters.picks) {
    ++stats_.adapters[p.id].requests;
  }
  ++stats_.requests_total;
  s.job = std::move(job);
  report_blocks(i);
}

void Scheduler::admit(std::unique_lock<std::mutex>&) {
  // In queue order, passing over jobs whose adapters are still being built.
  for (auto it = queue_.begin(); it != queue_.end();) {
    std::shared_ptr<CompletionJob> job = *it;
    if (job->cancelled) {
      it = queue_.erase(it);
      job->push(error_event(ErrorKind::kLimit, "cancelled before it started"));
      continue;
    }
    if (!job->adapters_ready || waits_for_leader(*job)) {
      ++it;
      continue;
    }
    // A free slot that loses nothing (empty, or all it holds is a prefix of this prompt: a
    // conversation going on), the longest such prefix first; else the free slot with the longest
    // reusable prefix, ties to the least recently used one (its cache the least likely to be wanted
    // again). start() then copies a longer prefix from any slot, so a new conversation takes an
    // empty slot rather than one holding another conversation that shares its system prompt.
    int64_t best = -1, best_len = -1, best_age = 0;
    bool best_keeps = false;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      if (s.job) continue;
      const int64_t len =
          (job->cache_prompt && s.digest == job->adapters.digest) ? common_prefix(s.cached, job->prompt) : 0;
      const bool keeps = job->cache_prompt && len == static_cast<int64_t>(s.cached.size());
      if (keeps != best_keeps ? keeps : (len > best_len || (len == best_len && s.last_used < best_age))) {
        best = static_cast<int64_t>(i);
        best_len = len;
        best_age = s.last_used;
        best_keeps = keeps;
      }
    }
    if (best < 0) break;
    it = queue_.erase(it);
    start(static_cast<size_t>(best), std::move(job));
  }
  stats_.deferred = static_cast<int64_t>(queue_.size());
}

void Scheduler::finish(size_t i, const char* why) {
  Slot& s = slots_[i];
  engine::Sequence& q = *s.seq;
  JobEvent e;
  e.final = true;
  e.reason = q.reason();
  e.stopping_word = q.stopping_word();
  e.slot = static_cast<int64_t>(i);
  e.prompt_tokens = static_cast<int64_t>(q.prompt().size());
  e.tokens_cached = q.cached_at_start();
  e.predicted = static_cast<int64_t>(q.generated().size());
  e.prompt_ms = q.prompt_seconds() * 1e3;
  e.predicted_ms = q.decode_seconds() * 1e3;
  if (q.params().embedding && q.reason() != engine::StopReason::Cancelled) e.hidden = std::move(q.hidden_rows());
  stats_.prompt_seconds_total += q.prompt_seconds();
  stats_.predicted_seconds_total += q.decode_seconds();
  if (q.reason() == engine::StopReason::Cancelled) ++stats_.requests_cancelled;
  // The tokens whose KV is now in the cache: the history up to what was evaluated.
  s.cached = q.prompt();
  s.cached.insert(s.cached.end(), q.generated().begin(), q.generated().end());
  s.cached.resize(static_cast<size_t>(std::min<int64_t>(s.cache->size(), static_cast<int64_t>(s.cached.size()))));
  if (why) {
    e.failed = true;
    e.error_kind = ErrorKind::kLimit;
    e.error = why;
  }
  for (const auto& p : s.job->adapters.picks) {
    if (!engine_.adapters().contains(p.id)) {  // unloaded while it ran: its counters go with it
      stats_.adapters.erase(p.id);
      continue;
    }
    auto& c = stats_.adapters[p.id];
    c.prompt_tokens += e.prompt_tokens - e.tokens_cached;
    c.generation_tokens += e.predicted;
  }
  s.job->push(std::move(e));
  // The HTTP side may hold the job a while longer: drop its adapter references now.
  s.job->adapters.picks.clear();
  s.job->params.adapters.clear();
  s.job.reset();
  s.seq.reset();
  engine_.adapters().trim();  // its adapters may be idle now: the budget applies to them again
  if (!s.contents.empty()) drop_if_stale(s, engine_.adapters().list());
  report_blocks(i);
}

void Scheduler::fail_active(const std::exception& ex) {
  const auto* ge = dynamic_cast<const Error*>(&ex);
  for (auto& s : slots_) {
    if (!s.job) continue;
    s.job->push(error_event(ge ? ge->kind() : ErrorKind::kInternal, ex.what()));
    s.job.reset();
    s.seq.reset();
    s.cache->truncate(0);
    s.cached.clear();
  }
  for (size_t i = 0; i < slots_.size(); ++i) report_blocks(i);
  flush_blocks();
}

void Scheduler::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    const auto has_active = [&] {
      return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.job != nullptr; });
    };
    const auto has_free = [&] {
      return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.job == nullptr; });
    };
    const auto has_startable = [&] {
      return std::any_of(queue_.begin(), queue_.end(), [&](const auto& j) {
        return (j->adapters_ready && !waits_for_leader(*j)) || j->cancelled.load();
      });
    };
    cv_.wait(lock, [&] { return stopping_ || has_active() || (has_startable() && has_free()); });
    if (stopping_) {
      for (auto& job : queue_) job->push(error_event(ErrorKind::kLimit, "the server is shutting down"));
      queue_.clear();
      to_load_.clear();
      for (size_t i = 0; i < slots_.size(); ++i)
        if (slots_[i].job) {
          slots_[i].seq->cancel();
          finish(i, "the server is shutting down");
        }
      return;
    }
    admit(lock);
    // Cancelled (client gone) and timed-out requests leave before the step.
    const auto now = Clock::now();
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (s.job && (s.job->cancelled || now > s.job->deadline)) {
        s.seq->cancel();
        finish(i, s.job->cancelled ? nullptr : "the request ran past --timeout and was stopped");
      }
    }
    std::vector<size_t> active;
    std::vector<engine::Sequence*> seqs;
    std::set<engine::Digest> digests;
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].job) {
        active.push_back(i);
        seqs.push_back(slots_[i].seq.get());
        digests.insert(slots_[i].digest);
      }
    stats_.processing = static_cast<int64_t>(active.size());
    flush_blocks();  // what admission and cancellations changed
    if (active.empty()) continue;
    lock.unlock();
    engine::StepResult r;
    bool ok = true;
    try {
      r = engine_.step(seqs, opts_.batch_tokens);
    } catch (const std::exception& ex) {
      lock.lock();
      fail_active(ex);
      ok = false;
    }
    if (!ok) continue;
    lock.lock();
    ++stats_.steps_total;
    if (digests.size() > 1) ++stats_.mixed_steps_total;
    stats_.prompt_tokens_total += r.prompt_tokens;
    for (size_t k = 0; k < active.size(); ++k) {
      Slot& s = slots_[active[k]];
      engine::StepOutput& out = r.outputs[k];
      const bool eos = s.seq->reason() == engine::StopReason::Eos;
      if (out.sampled && !eos) ++stats_.predicted_tokens_total;
      if (!out.text.empty() || (out.sampled && !eos)) {
        JobEvent e;
        e.text = std::move(out.text);
        if (out.sampled && !eos) {
          e.tokens.push_back(out.token);
          if (!out.top.empty()) e.probs.push_back(std::move(out.top));
          if (s.job->params.n_probs > 0 || s.job->params.token_prob) e.token_probs.push_back(out.prob);
        }
        s.job->push(std::move(e));
      }
      if (s.seq->finished()) finish(active[k]);
      else report_blocks(active[k]);
    }
    flush_blocks();
    int64_t kv = 0;
    for (const auto& s : slots_) {
      kv += s.cache->size();
      stats_.n_tokens_max = std::max(stats_.n_tokens_max, s.cache->size());
    }
    stats_.kv_tokens = kv;
    stats_.processing = static_cast<int64_t>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.job != nullptr; }));
  }
}

}  // namespace graft::server
