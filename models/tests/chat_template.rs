//! Chat templates rendered with minijinja the way transformers renders them with Jinja.

mod common;

use std::fs::File;
use std::path::PathBuf;

use candle_core::quantized::gguf_file::Content;
use formwork_models::chat::{render_chat, ChatMessage};
use formwork_models::tokenizer::GgufTokenizer;
use formwork_models::ModelError;

fn formwork_home() -> PathBuf {
    std::env::var_os("FORMWORK_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/formwork")
        })
}

/// `tokenizer.chat_template` of SmolLM2-135M-Instruct.Q4_1.gguf, copied here so the render
/// checks run without the model; `smollm2_template_from_gguf` checks the copy is exact.
const SMOLLM2_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// Gemma 3 instruct's template (google/gemma-3-*-it), a template that uses `raise_exception`,
/// `is string`, `| trim`, whitespace control and `loop.first`.
const GEMMA3_IT_TEMPLATE: &str = r#"{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"#;

/// `tokenizer.chat_template` of the Qwen2.5-Coder-0.5B-Instruct GGUF (`qwen2.5-coder-0.5b`),
/// copied here so the render checks run without the model; `qwen25_template_from_gguf`
/// checks the copy is exact. It reads `message.tool_calls` and `tools`, which our messages
/// lack: undefined, hence false, as in Python Jinja.
const QWEN25_TEMPLATE: &str = r#"{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"#;

fn msgs(pairs: &[(&str, &str)]) -> Vec<ChatMessage> {
    pairs
        .iter()
        .map(|(r, c)| ChatMessage::new(*r, *c))
        .collect()
}

#[test]
fn smollm2_chatml_system_user_generation_prompt() {
    let text = render_chat(
        SMOLLM2_TEMPLATE,
        &msgs(&[("system", "You are terse."), ("user", "What is 2+2?")]),
        true,
        "<|im_start|>",
        "<|im_end|>",
    )
    .unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nYou are terse.<|im_end|>\n\
         <|im_start|>user\nWhat is 2+2?<|im_end|>\n\
         <|im_start|>assistant\n"
    );
}

#[test]
fn smollm2_default_system_prompt_and_no_generation_prompt() {
    let text = render_chat(
        SMOLLM2_TEMPLATE,
        &msgs(&[("user", "Hi"), ("assistant", "Hello!")]),
        false,
        "<|im_start|>",
        "<|im_end|>",
    )
    .unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello!<|im_end|>\n"
    );
}

/// The template in the GGUF file is the one copied above, and its rendered prompt tokenizes
/// with the special tokens recognised.
#[test]
fn smollm2_template_from_gguf() {
    let path = formwork_home().join("models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.exists() {
        common::skip::skipped(format_args!(
            "SKIPPED: model not fetched ({}); run formwork models fetch smollm2-135m",
            path.display()
        ));
        return;
    }
    let content = Content::read(&mut File::open(&path).unwrap()).unwrap();
    let tok = GgufTokenizer::from_gguf(&content).unwrap();
    assert_eq!(tok.chat_template(), Some(SMOLLM2_TEMPLATE));
    let bos = tok.token_text(tok.bos_id().unwrap()).unwrap();
    let eos = tok.token_text(tok.eos_ids()[0]).unwrap();
    let text = render_chat(
        tok.chat_template().unwrap(),
        &msgs(&[("system", "S"), ("user", "U")]),
        true,
        bos,
        eos,
    )
    .unwrap();
    let ids = tok.encode(&text).unwrap();
    // <|im_start|> = 1, <|im_end|> = 2: three turns opened, two closed.
    assert_eq!(ids.iter().filter(|&&id| id == 1).count(), 3, "{ids:?}");
    assert_eq!(ids.iter().filter(|&&id| id == 2).count(), 2, "{ids:?}");
    assert_eq!(ids[0], 1);
    assert_eq!(tok.decode(&ids).unwrap(), text);
}

#[test]
fn gemma3_it_template_renders_and_raises() {
    let text = render_chat(
        GEMMA3_IT_TEMPLATE,
        &msgs(&[("system", "You are terse."), ("user", "  Hi  ")]),
        true,
        "<bos>",
        "<eos>",
    )
    .unwrap();
    assert_eq!(
        text,
        "<bos><start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
    );

    let err = render_chat(
        GEMMA3_IT_TEMPLATE,
        &msgs(&[("user", "a"), ("user", "b")]),
        true,
        "<bos>",
        "<eos>",
    )
    .unwrap_err();
    let ModelError::ChatTemplate(msg) = &err else {
        panic!("expected a chat template error, got {err:?}");
    };
    assert!(msg.contains("Conversation roles must alternate"), "{msg}");
}

/// Idioms from Hugging Face templates: Python string methods, `namespace`, loop controls,
/// `trim_blocks`/`lstrip_blocks`, `strftime_now`.
#[test]
fn hf_template_idioms() {
    let template = "\
{% set ns = namespace(found=false) %}
{% for m in messages %}
    {% if m.role == 'system' %}{% set ns.found = true %}{% continue %}{% endif %}
    {% if m.content.startswith('STOP') %}{% break %}{% endif %}
[{{ m.role.upper() }}] {{ m.content.strip() }}|{{ m.content.split(',')|length }}
{% endfor %}
{{ ns.found }} {{ strftime_now('%Y')|length }}";
    let text = render_chat(
        template,
        &msgs(&[
            ("system", "ignored"),
            ("user", "  a,b  "),
            ("assistant", "c"),
            ("user", "STOP here"),
            ("user", "never"),
        ]),
        false,
        "",
        "",
    )
    .unwrap();
    // Python Jinja, which HF templates are written for, prints booleans as `True`.
    assert_eq!(text, "[USER] a,b|2\n[ASSISTANT] c|1\nTrue 4");
}

#[test]
fn template_errors_name_the_line() {
    let err = render_chat("ok\n{% if %}", &[], false, "", "").unwrap_err();
    let ModelError::ChatTemplate(msg) = &err else {
        panic!("expected a chat template error, got {err:?}");
    };
    assert!(msg.contains("line 2"), "{msg}");
}

#[test]
fn qwen25_chatml_system_user_generation_prompt() {
    let text = render_chat(
        QWEN25_TEMPLATE,
        &msgs(&[("system", "You are terse."), ("user", "What is 2+2?")]),
        true,
        "<|endoftext|>",
        "<|im_end|>",
    )
    .unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nYou are terse.<|im_end|>\n\
         <|im_start|>user\nWhat is 2+2?<|im_end|>\n\
         <|im_start|>assistant\n"
    );
}

#[test]
fn qwen25_default_system_prompt_and_assistant_turn() {
    let text = render_chat(
        QWEN25_TEMPLATE,
        &msgs(&[("user", "Hi"), ("assistant", "Hello!")]),
        false,
        "<|endoftext|>",
        "<|im_end|>",
    )
    .unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n\
         <|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello!<|im_end|>\n"
    );
}

/// The template in the Qwen GGUF file is the one copied above, and its rendered prompt
/// tokenizes with the special tokens recognised.
#[test]
fn qwen25_template_from_gguf() {
    let path =
        formwork_home().join("models/qwen2.5-coder-0.5b/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    if !path.exists() {
        common::skip::skipped(format_args!(
            "SKIPPED: model not fetched ({}); run formwork models fetch qwen2.5-coder-0.5b",
            path.display()
        ));
        return;
    }
    let content = Content::read(&mut File::open(&path).unwrap()).unwrap();
    let tok = GgufTokenizer::from_gguf(&content).unwrap();
    assert_eq!(tok.chat_template(), Some(QWEN25_TEMPLATE));
    let bos = tok.token_text(tok.bos_id().unwrap()).unwrap();
    let eos = tok.token_text(tok.eos_ids()[0]).unwrap();
    assert_eq!((bos, eos), ("<|endoftext|>", "<|im_end|>"));
    let text = render_chat(
        tok.chat_template().unwrap(),
        &msgs(&[("system", "S"), ("user", "U")]),
        true,
        bos,
        eos,
    )
    .unwrap();
    let ids = tok.encode(&text).unwrap();
    // <|im_start|> = 151644, <|im_end|> = 151645: three turns opened, two closed.
    assert_eq!(
        ids.iter().filter(|&&id| id == 151_644).count(),
        3,
        "{ids:?}"
    );
    assert_eq!(
        ids.iter().filter(|&&id| id == 151_645).count(),
        2,
        "{ids:?}"
    );
    assert_eq!(ids[0], 151_644);
    assert_eq!(tok.decode(&ids).unwrap(), text);
}

/// Phi-3's template (from llama.cpp's `ggml-vocab-phi-3.gguf`, as Phi-3-mini-4k-instruct
/// ships it): `<|user|>`, `<|end|>` and `<|assistant|>` come out as one control token each,
/// the template writes the BOS itself, and `<|end|>` ends the reply.
#[test]
fn phi3_template_from_llamacpp_vocab() {
    let Some(dir) = common::llamacpp_vocab_dir() else {
        return;
    };
    let path = dir.join("ggml-vocab-phi-3.gguf");
    let content = Content::read(&mut File::open(&path).unwrap()).unwrap();
    let tok = GgufTokenizer::from_gguf(&content).unwrap();
    let bos = tok.token_text(tok.bos_id().unwrap()).unwrap();
    let eos = tok.token_text(tok.eos_ids()[0]).unwrap();
    assert_eq!((bos, eos), ("<s>", "<|endoftext|>"));
    let text = render_chat(
        tok.chat_template().unwrap(),
        &msgs(&[("user", "Hi"), ("assistant", "Hello"), ("user", "Bye")]),
        true,
        bos,
        eos,
    )
    .unwrap();
    assert_eq!(
        text,
        "<s><|user|>\nHi<|end|>\n<|assistant|>\nHello<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n"
    );
    let ids = tok.encode(&text).unwrap();
    let id = |t: &str| (0..tok.vocab_size() as u32).find(|&i| tok.token_text(i) == Some(t));
    let (user, end, assistant) = (
        id("<|user|>").unwrap(),
        id("<|end|>").unwrap(),
        id("<|assistant|>").unwrap(),
    );
    assert_eq!((user, end, assistant), (32_010, 32_007, 32_001));
    let count = |t: u32| ids.iter().filter(|&&i| i == t).count();
    assert_eq!(
        (count(user), count(end), count(assistant)),
        (2, 3, 2),
        "{ids:?}"
    );
    assert_eq!(ids[0], 1, "{ids:?}");
    assert!(tok.eos_ids().contains(&end), "{:?}", tok.eos_ids());
}
