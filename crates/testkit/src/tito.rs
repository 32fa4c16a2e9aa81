//! What a token-in/token-out test needs of a model: a small BPE tokenizer trained here with
//! the `tokenizers` library (byte-level, so any text encodes; the ChatML and Hermes markers as
//! added special tokens) and a Qwen3-style chat template that renders tools in a system
//! block, tool results as `<tool_response>` user turns, tool calls as `<tool_call>` JSON, and
//! drops the reasoning of every earlier assistant turn: re-rendering a conversation never
//! gives back the tokens the model generated.

use std::path::{Path, PathBuf};

use tokenizers::models::TrainerWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, Tokenizer};

/// The markers the template and the scripted model write, each one token.
pub const SPECIAL: [&str; 10] = [
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<tools>",
    "</tools>",
];

/// A Qwen3-style template that drops earlier reasoning.
pub const TEMPLATE: &str = r#"{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}
{% endif %}# Tools
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools><|im_end|>
{%- elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{%- endif %}
{%- for m in messages %}
{%- if m.role == 'user' %}<|im_start|>user
{{ m.content }}<|im_end|>
{%- elif m.role == 'assistant' %}<|im_start|>assistant
{% if m.content %}{{ m.content }}{% endif %}
{%- for tc in m.tool_calls or [] %}<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments }}}
</tool_call>
{%- endfor %}<|im_end|>
{%- elif m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"#;

/// Trains the tokenizer on text like the conversations it will see and writes
/// `tokenizer.json` and `template.jinja` into `dir`; their paths.
pub fn write_model(dir: &Path) -> (PathBuf, PathBuf) {
    let corpus = dir.join("corpus.txt");
    let sample = "<|im_start|>user\nAppend the steps to work.txt (n0).<|im_end|>\
        <|im_start|>assistant\n<think>step 3</think>\n<tool_call>\n{\"name\": \"shell\", \
        \"arguments\": {\"command\": \"grep -qx 'step 4' work.txt 2>/dev/null || echo step 4 \
        >> work.txt; sleep 0.300\"}}\n</tool_call><|im_end|><|im_start|>user\n<tool_response>\n\
        exit code 0\n</tool_response><|im_end|>\n{\"type\": \"function\", \"function\": \
        {\"name\": \"shell\", \"description\": \"Run a shell command\", \"parameters\": \
        {\"type\": \"object\", \"properties\": {\"command\": {\"type\": \"string\"}}}}}\n";
    std::fs::write(&corpus, sample.repeat(40)).expect("corpus");
    let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
        .vocab_size(600)
        .min_frequency(2)
        .special_tokens(SPECIAL.iter().map(|s| AddedToken::from(*s, true)).collect())
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build()
        .into();
    // No space put before each piece of text (as Qwen's tokenizer): decoding gives back the
    // text encoded.
    let byte_level = ByteLevel::new(false, true, true);
    let mut tokenizer = Tokenizer::new(BPE::default());
    tokenizer.with_pre_tokenizer(Some(byte_level));
    tokenizer.with_decoder(Some(byte_level));
    tokenizer
        .train_from_files(&mut trainer, vec![corpus.display().to_string()])
        .expect("train the tokenizer");
    tokenizer
        .add_special_tokens(SPECIAL.map(|s| AddedToken::from(s, true)))
        .expect("add the special tokens");
    let path = dir.join("tokenizer.json");
    tokenizer.save(&path, false).expect("save the tokenizer");
    let template = dir.join("template.jinja");
    std::fs::write(&template, TEMPLATE).expect("template");
    (path, template)
}
