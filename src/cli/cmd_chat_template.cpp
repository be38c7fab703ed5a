// `graft chat-template`: renders a conversation with a model's chat template
// (from a GGUF file or a .jinja file) exactly as `graft serve` would, or
// parses a model reply the way the server turns it into an OpenAI message.
// For people debugging templates and prompts.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>

#include "chat/template.h"
#include "chat/tool_calls.h"
#include "cli/commands.h"
#include "io/gguf_file.h"
#include "util/files.h"

namespace graft::cli {

namespace {

struct ChatTemplateOptions {
  std::string source;   // a .gguf model or a template file
  std::string request;  // a chat request body or a messages array; "-" for stdin
  std::string bos, eos;
  std::string kwargs;  // JSON object
  bool no_generation_prompt = false;
  bool raw = false;
  bool info = false;
  std::string reply;  // a model reply to parse; "-" for stdin
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "graft: %s\n", message.c_str());
  throw CLI::RuntimeError(1);
}

std::string read_input(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  Result<std::string> text = read_file(path);
  if (!text) fail(text.error().message);
  return *text;
}

struct Loaded {
  std::string source;
  std::string bos, eos;
};

// The template and the BOS/EOS token texts of a GGUF model, or a template file.
Loaded load_template(const std::string& path) {
  Loaded out;
  if (path.size() < 5 || path.substr(path.size() - 5) != ".gguf") {
    out.source = read_input(path);
    return out;
  }
  Result<GgufFile> file = GgufFile::open(path);
  if (!file) fail(file.error().message);
  std::optional<std::string> source = file->find_string("tokenizer.chat_template");
  if (!source) fail(path + " has no tokenizer.chat_template");
  out.source = *source;
  Result<std::vector<std::string>> tokens = file->get_string_array("tokenizer.ggml.tokens");
  auto token = [&](const char* key) -> std::string {
    std::optional<int64_t> id = file->find_int(key);
    if (!tokens || !id || *id < 0 || *id >= static_cast<int64_t>(tokens->size())) return "";
    return (*tokens)[static_cast<std::size_t>(*id)];
  };
  out.bos = token("tokenizer.ggml.bos_token_id");
  out.eos = token("tokenizer.ggml.eos_token_id");
  return out;
}

ChatJson default_conversation() {
  return ChatJson::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello!"},
    {"role": "assistant", "content": "Hi! How can I help?"},
    {"role": "user", "content": "What is the capital of France?"}
  ])");
}

void print_info(const ChatTemplate& t, const Loaded& loaded) {
  const ChatTemplateCaps& c = t.caps();
  auto yes = [](bool b) { return b ? "yes" : "no"; };
  std::printf("tool call format   %s\n",
              std::string(tool_call_format_name(detect_tool_call_format(t.source()))).c_str());
  std::printf("system role        %s\n", yes(c.system_role));
  std::printf("tools              %s\n", yes(c.tools));
  std::printf("tool calls         %s\n", yes(c.tool_calls));
  std::printf("tool results       %s\n", yes(c.tool_responses));
  std::printf("object arguments   %s\n", yes(c.object_arguments));
  std::printf("content parts      %s\n", yes(c.typed_content));
  std::printf("thinking           %s\n", yes(c.thinking));
  std::printf("bos / eos          \"%s\" / \"%s\"\n", loaded.bos.c_str(), loaded.eos.c_str());
}

void run(const ChatTemplateOptions& o) {
  Loaded loaded = load_template(o.source);
  Result<ChatTemplate> t = ChatTemplate::parse(loaded.source);
  if (!t) fail(t.error().message);
  if (o.info) {
    print_info(*t, loaded);
    return;
  }

  ChatRenderOptions opts;
  opts.add_generation_prompt = !o.no_generation_prompt;
  opts.bos_token = o.bos.empty() ? loaded.bos : o.bos;
  opts.eos_token = o.eos.empty() ? loaded.eos : o.eos;
  ChatJson messages = default_conversation();
  ChatJson tools = nullptr;
  if (!o.request.empty()) {
    ChatJson body = ChatJson::parse(read_input(o.request), nullptr, false);
    if (body.is_discarded()) fail("the request is not valid JSON");
    if (body.is_object()) {
      messages = body.value("messages", ChatJson());
      tools = body.value("tools", ChatJson());
      if (body.contains("chat_template_kwargs")) opts.extra_kwargs = body["chat_template_kwargs"];
    } else {
      messages = body;
    }
  }
  if (!o.kwargs.empty()) {
    ChatJson kwargs = ChatJson::parse(o.kwargs, nullptr, false);
    if (kwargs.is_discarded() || !kwargs.is_object()) fail("--kwargs must be a JSON object");
    for (auto& [k, v] : kwargs.items()) opts.extra_kwargs[k] = v;
  }
  Result<std::string> prompt =
      o.raw ? t->render_raw(messages, tools, opts) : t->render(messages, tools, opts);
  if (!prompt) fail(prompt.error().message);
  if (o.reply.empty()) {
    std::fwrite(prompt->data(), 1, prompt->size(), stdout);
    return;
  }
  // What the server would answer if the model wrote this reply.
  bool offered_tools = tools.is_array() && !tools.empty();
  ToolCallFormat format = offered_tools ? detect_tool_call_format(t->source()) : ToolCallFormat::none;
  ParsedMessage parsed =
      parse_model_output(read_input(o.reply), format, t->caps().thinking, prompt_opens_thinking(*prompt));
  ChatJson out = {{"message", assistant_message_json(parsed)},
                  {"finish_reason", parsed.tool_calls.empty() ? "stop" : "tool_calls"}};
  std::printf("%s\n", out.dump(2).c_str());
}

}  // namespace

void add_chat_template_command(CLI::App& app) {
  auto o = std::make_shared<ChatTemplateOptions>();
  auto* cmd = app.add_subcommand(
      "chat-template",
      "Render a conversation with a model's chat template (or parse a reply) as graft serve would");
  cmd->add_option("source", o->source, "A GGUF model (its tokenizer.chat_template) or a Jinja template file")
      ->required();
  cmd->add_option(
      "-r,--request", o->request,
      "A chat request body ({\"messages\", \"tools\", \"chat_template_kwargs\"}) or a messages array, "
      "as a JSON file; - for stdin (default: a short sample conversation)");
  cmd->add_option("--bos", o->bos, "The BOS token text (default: the model's)");
  cmd->add_option("--eos", o->eos, "The EOS token text (default: the model's)");
  cmd->add_option("--kwargs", o->kwargs,
                  "Extra template variables as a JSON object, e.g. '{\"enable_thinking\": false}'");
  cmd->add_flag("--no-generation-prompt", o->no_generation_prompt, "Do not open the assistant's turn");
  cmd->add_flag("--raw", o->raw, "Render the messages exactly as given, without graft's request adaptations");
  cmd->add_flag("--info", o->info, "Print what the template supports instead of rendering");
  cmd->add_option(
      "--parse-reply", o->reply,
      "A file with a model reply to turn into the OpenAI message graft would return; - for stdin");
  cmd->callback([o] { run(*o); });
}

}  // namespace graft::cli
