// graft chat: an interactive conversation in the terminal on any model with a chat template. Each
// turn renders the whole history through the template and streams the reply; the --lora adapters
// stay loaded and are mixed live with /adapter NAME SCALE (the engine's unfused terms, so a change
// costs nothing and applies to the next reply). Commands start with '/'; Ctrl-D ends the chat.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "cli/subcommands.h"
#include "cli/model_args.h"
#include "graft/core/error.h"
#include "graft/engine/generate.h"
#include "graft/io/staged_dir.h"
#include "graft/runtime/kernels.h"
#include "graft/text/chat_prompt.h"

namespace graft::cli {

namespace {

struct ChatArgs {
  ModelArgs model;
  AdapterOptions adapters;
  std::string system;
  int64_t max_tokens = -1;
  runtime::SamplingParams sampling;
};

constexpr const char* kHelp =
    "/adapters             the adapters and their scales\n"
    "/adapter NAME SCALE   set an adapter's scale for the next replies (0: off)\n"
    "/reset                forget the conversation (the system message stays)\n"
    "/save FILE            write the conversation and the scales as JSON\n"
    "/quit                 end (Ctrl-D too)\n";

// One conversation: the history, the adapters' scales, and the turns.
class Chat {
 public:
  Chat(engine::Engine& e, const ChatArgs& a, const text::ChatPrompt& prompt)
      : e_(e), a_(a), prompt_(prompt), cache_(e.model().config, context_size(a.model, e.model().config, 4096), cache_type(a.model)) {
    for (const engine::AdapterInfo& info : e.adapters().list()) scales_.push_back({info.id, info.scale});
    reset();
  }

  // A line the person typed: false when the chat should end.
  bool take(const std::string& line) {
    if (line.empty()) return true;
    if (line[0] == '/') return command(line);
    history_.push_back({{"role", "user"}, {"content", line}});
    try {
      reply();
    } catch (const Error& err) {  // this turn fails, the chat goes on
      history_.erase(history_.end() - 1);
      std::fprintf(stderr, "error: %s\n", err.what());
    }
    return true;
  }

 private:
  void reset() {
    history_ = nlohmann::ordered_json::array();
    if (!a_.system.empty()) history_.push_back({{"role", "system"}, {"content", a_.system}});
  }

  void reply() {
    const std::vector<int32_t> prompt = prompt_.encode(history_);
    engine::GenerateOptions g;
    g.max_tokens = a_.max_tokens;
    g.sampling = a_.sampling;
    g.eos_ids = e_.model().config.eos_token_ids;
    engine::Selection chosen = e_.adapters().select(std::nullopt, scales_);
    e_.adapters().make_resident(chosen);
    g.adapters = chosen.adapters();
    cache_.truncate(0);
    const engine::GenerateResult r =
        engine::generate(e_.pool(), e_.transformer(), e_.tokenizer(), cache_, prompt, g, print_piece);
    std::printf("\n");
    history_.push_back({{"role", "assistant"}, {"content", r.text}});
    if (r.reason == engine::StopReason::ContextFull)
      std::fprintf(stderr, "(the context is full: /reset to start over, or a larger --ctx-size)\n");
  }

  bool command(const std::string& line) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "/quit" || cmd == "/exit") return false;
    if (cmd == "/reset") {
      reset();
      std::fprintf(stderr, "(conversation cleared)\n");
    } else if (cmd == "/adapters") {
      list();
    } else if (cmd == "/adapter") {
      set_scale(in);
    } else if (cmd == "/save") {
      std::string path;
      in >> path;
      if (path.empty()) std::fprintf(stderr, "usage: /save FILE\n");
      else save(path);
    } else {
      std::fprintf(stderr, "%s%s", cmd == "/help" ? "" : ("unknown command " + cmd + "\n").c_str(), kHelp);
    }
    return true;
  }

  void list() const {
    const auto infos = e_.adapters().list();
    if (infos.empty()) std::fprintf(stderr, "(no adapters: start graft chat with --lora DIR)\n");
    for (size_t i = 0; i < infos.size(); ++i)
      std::fprintf(stderr, "%-24s %g\n", infos[i].name.c_str(), scales_[i].scale);
  }

  void set_scale(std::istringstream& in) {
    std::string name, value;
    in >> name >> value;
    const auto infos = e_.adapters().list();
    for (size_t i = 0; i < infos.size(); ++i) {
      if (infos[i].name != name) continue;
      char* end = nullptr;
      const double s = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !std::isfinite(s)) {
        std::fprintf(stderr, "'%s' is not a scale (a finite number)\n", value.c_str());
        return;
      }
      scales_[i].scale = s;
      std::fprintf(stderr, "(%s at %g from the next reply)\n", name.c_str(), s);
      return;
    }
    std::fprintf(stderr, "no adapter '%s' (/adapters lists them)\n", name.c_str());
  }

  void save(const std::string& path) const {
    nlohmann::ordered_json scales = nlohmann::ordered_json::object();
    const auto infos = e_.adapters().list();
    for (size_t i = 0; i < infos.size(); ++i) scales[infos[i].name] = scales_[i].scale;
    const nlohmann::ordered_json doc{{"model", a_.model.model}, {"adapters", scales}, {"messages", history_}};
    try {
      io::write_file_checked(path, doc.dump(2) + "\n");
      std::fprintf(stderr, "(saved to %s)\n", path.c_str());
    } catch (const Error& err) {
      std::fprintf(stderr, "error: %s\n", err.what());
    }
  }

  engine::Engine& e_;
  const ChatArgs& a_;
  const text::ChatPrompt& prompt_;
  runtime::KVCache cache_;
  std::vector<engine::ScaleEntry> scales_;  // by adapter id
  nlohmann::ordered_json history_;
};

int run_chat(ChatArgs& a) {
  runtime::validate(a.sampling);
  engine::EngineOptions o = engine_options(a.model);
  apply_adapter_options(a.adapters, o);
  engine::Engine e(o);
  const model::LoadedModel& m = e.model();
  if (!m.chat_template)
    fail_as(ErrorKind::kBadRequest, "model '", a.model.model, "' has no chat template; use graft generate for plain text");
  report_run(e, o);
  const text::ChatPrompt prompt(e.tokenizer(), *m.chat_template, m.chat_template_origin);
  Chat chat(e, a, prompt);
  std::fprintf(stderr, "chat with %s: type a message; /help for commands, Ctrl-D to end\n", a.model.model.c_str());
  for (std::string line;;) {
    std::printf("> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) {
      std::printf("\n");
      break;
    }
    if (!chat.take(line)) break;
  }
  return 0;
}

}  // namespace

Runner add_chat_command(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  add_model_options(app, a->model);
  app.add_option("--system", a->system, "System message at the start of the conversation");
  add_sampling_options(app, a->sampling, a->max_tokens);
  add_adapter_options(app, a->adapters);
  app.footer(
      "Commands in the chat:\n" + std::string(kHelp) +
      "Example: graft chat -m models/SmolLM2-135M-Instruct.Q4_1.gguf --lora demo/adapters/pirate-peft");
  return [a] { return run_chat(*a); };
}

}  // namespace graft::cli
