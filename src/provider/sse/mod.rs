//! Reassembling a streamed chat completion from its bytes, without I/O.
//!
//! Kept apart from the HTTP client so every wire quirk can be tested byte by byte: chunk
//! boundaries anywhere (even inside a UTF-8 character or a CRLF), keep-alive comments
//! (`: OPENROUTER PROCESSING`), tool calls whose arguments arrive in fragments keyed by `index`,
//! usage in a separate `choices: []` chunk or on a second finish chunk, and errors inside the
//! 200 stream in every shape providers send them: a chunk with an `error` object (both observed
//! layouts), an `event: error` frame whatever its data holds, and a bare `code`/`message` object
//! without `choices` (docs/providers.md §1.3, §2.8).
//!
//! `frame`'s [`SseDecoder`] turns bytes into event payloads (the SSE framing); `assemble`'s
//! [`StreamAssembler`] turns payloads into a [`Completion`], reading text-only chunks on the
//! borrowed path of `text`; [`StreamParser`], here, joins the two for the client.

mod assemble;
mod frame;
mod text;

pub(super) use assemble::Progress;
use assemble::StreamAssembler;
use frame::{Event, SseDecoder};

use super::{CallError, Completion, TransportError};

/// Bytes in, completion out: the decoder and the assembler together.
#[derive(Debug, Default)]
pub(super) struct StreamParser {
    decoder: SseDecoder,
    assembler: StreamAssembler,
    events: Vec<Event>,
    done: bool,
}

impl StreamParser {
    /// Feeds the next bytes of the body. Stops at `[DONE]` or at the first error.
    pub(super) fn feed(
        &mut self,
        bytes: &[u8],
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Progress, CallError> {
        if self.done {
            return Ok(Progress::Done);
        }
        self.decoder.feed(bytes, &mut self.events)?;
        self.drain(on_text)
    }

    /// The body ended (or the stream was stopped at `[DONE]`).
    pub(super) fn finish(mut self, on_text: &mut dyn FnMut(&str)) -> Result<Completion, CallError> {
        if !self.done {
            // Only an unterminated last event is left: if it does not read, the body was cut
            // inside it (a half line, half a UTF-8 character), which is truncation.
            let tail = self
                .decoder
                .finish(&mut self.events)
                .and_then(|()| self.drain(on_text));
            match tail {
                Err(CallError::Transport(TransportError::Malformed(_))) => {
                    return Err(CallError::Transport(TransportError::Truncated));
                }
                other => {
                    other?;
                }
            }
        }
        self.assembler.finish(self.done)
    }

    fn drain(&mut self, on_text: &mut dyn FnMut(&str)) -> Result<Progress, CallError> {
        for Event { data, error } in std::mem::take(&mut self.events) {
            if error {
                return Err(self.assembler.error_event(&data));
            }
            if self.assembler.event(&data, on_text)? == Progress::Done {
                self.done = true;
                return Ok(Progress::Done);
            }
        }
        Ok(Progress::More)
    }
}

#[cfg(test)]
mod tests {
    use super::text::{Object, TextChunk};
    use super::*;
    use crate::chat::{ToolCall, Usage};
    use crate::provider::wire;
    use serde_json::Value;

    /// docs/providers.md §1.3, text stream with keep-alive comments, usage layout (a): a `choices: []` chunk.
    const TEXT_STREAM: &str = r#": OPENROUTER PROCESSING

: OPENROUTER PROCESSING

data: {"id":"gen-1739458867-kUKFjpDGCEBBvK6V46PX","provider":"OpenAI","model":"openai/gpt-4o-mini","object":"chat.completion.chunk","created":1739458867,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null,"native_finish_reason":null,"logprobs":null}],"system_fingerprint":"fp_72ed7ab54c"}

data: {"id":"gen-1739458867-kUKFjpDGCEBBvK6V46PX","provider":"OpenAI","model":"openai/gpt-4o-mini","object":"chat.completion.chunk","created":1739458867,"choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},"finish_reason":null,"native_finish_reason":null,"logprobs":null}],"system_fingerprint":"fp_72ed7ab54c"}

data: {"id":"gen-…","provider":"OpenAI","model":"openai/gpt-4o-mini","object":"chat.completion.chunk","created":1739458867,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"stop","native_finish_reason":"stop"}]}

data: {"id":"gen-…","provider":"OpenAI","model":"openai/gpt-4o-mini","object":"chat.completion.chunk","created":1739458867,"choices":[],"usage":{"prompt_tokens":17,"completion_tokens":1,"total_tokens":18,"cost":0.00003306,"completion_tokens_details":{"reasoning_tokens":0}}}

data: [DONE]

"#;

    /// docs/providers.md §1.3, the Amazon Bedrock capture: a zero-argument tool whose fragments are all "".
    /// The elided fields (`…`) of the capture are filled in so each line is JSON.
    const BEDROCK_TOOL_STREAM: &str = r#"data: {"id":"gen-1772969079-EhEx5DeV7JqM43lpl47Y","object":"chat.completion.chunk","created":1772969079,"model":"anthropic/claude-4.5-haiku-20251001","provider":"Amazon Bedrock","choices":[{"index":0,"delta":{"content":null,"role":"assistant","tool_calls":[{"index":0,"id":"toolu_bdrk_01AMXFNuQYF6fxS1hryPtu9K","type":"function","function":{"name":"get_all_tabs","arguments":""}}]},"finish_reason":null,"native_finish_reason":null}]}

data: {"id":"gen-1772969079-EhEx5DeV7JqM43lpl47Y","object":"chat.completion.chunk","created":1772969079,"model":"anthropic/claude-4.5-haiku-20251001","provider":"Amazon Bedrock","choices":[{"index":0,"delta":{"content":null,"role":"assistant","tool_calls":[{"index":0,"function":{"arguments":""}}]},"finish_reason":null,"native_finish_reason":null}]}

data: {"id":"gen-1772969079-EhEx5DeV7JqM43lpl47Y","object":"chat.completion.chunk","created":1772969079,"model":"anthropic/claude-4.5-haiku-20251001","provider":"Amazon Bedrock","choices":[{"index":0,"delta":{"content":"","role":"assistant"},"finish_reason":"tool_calls","native_finish_reason":"tool_calls"}]}

data: {"id":"gen-1772969079-EhEx5DeV7JqM43lpl47Y","object":"chat.completion.chunk","created":1772969079,"model":"anthropic/claude-4.5-haiku-20251001","provider":"Amazon Bedrock","choices":[],"usage":{"prompt_tokens":25105,"completion_tokens":55,"total_tokens":25160}}

data: [DONE]
"#;

    /// Usage layout (b): attached to a second finish chunk that still has a choice; intermediate
    /// chunks omit `finish_reason` entirely.
    const USAGE_ON_FINISH_STREAM: &str = concat!(
        "data: {\"id\":\"gen-2\",\"provider\":\"SiliconFlow\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"}}]}\n\n",
        "data: {\"id\":\"gen-2\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there\"}}]}\n\n",
        "data: {\"id\":\"gen-2\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"id\":\"gen-2\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\n",
        "data: [DONE]\n\n",
    );

    /// docs/providers.md §2.8, documented layout 1: top-level error and a `finish_reason: "error"` choice.
    const ERROR_LAYOUT_1: &str = concat!(
        "data: {\"id\":\"gen-abc123\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Par\"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"gen-abc123\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tial\"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"gen-abc123\",\"object\":\"chat.completion.chunk\",\"created\":1234567890,\"model\":\"openai/gpt-4o\",\"provider\":\"OpenAI\",\"error\":{\"code\":429,\"message\":\"Rate limit exceeded\",\"metadata\":{\"error_type\":\"rate_limit_exceeded\"}},\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"error\"}]}\n\n",
    );

    /// docs/providers.md §2.8, observed layout 2: `choices: []` plus a top-level error, then `[DONE]`.
    const ERROR_LAYOUT_2: &str = concat!(
        "data: {\"id\":\"gen-x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
        "data: {\"id\":\"gen-x\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"error\":{\"code\":500,\"message\":\"The server had an error processing your request\"}}\n\n",
        "data: [DONE]\n\n",
    );

    fn parse_in_pieces(
        stream: &[u8],
        pieces: &[usize],
    ) -> (Result<Completion, CallError>, Vec<String>) {
        let mut parser = StreamParser::default();
        let mut deltas = Vec::new();
        let mut on_text = |t: &str| deltas.push(t.to_owned());
        let mut start = 0;
        for &end in pieces.iter().chain([stream.len()].iter()) {
            match parser.feed(&stream[start..end], &mut on_text) {
                Err(e) => return (Err(e), deltas),
                Ok(Progress::Done) => break,
                Ok(Progress::More) => start = end,
            }
        }
        let result = parser.finish(&mut on_text);
        (result, deltas)
    }

    fn parse(stream: &str) -> (Result<Completion, CallError>, Vec<String>) {
        parse_in_pieces(stream.as_bytes(), &[])
    }

    #[test]
    fn text_stream_with_comments_and_a_usage_chunk() {
        let (result, deltas) = parse(TEXT_STREAM);
        let c = result.unwrap();
        assert_eq!(deltas, ["Hello"]);
        assert_eq!(c.text, "Hello");
        assert_eq!(c.id.as_deref(), Some("gen-1739458867-kUKFjpDGCEBBvK6V46PX"));
        assert_eq!(c.model.as_deref(), Some("openai/gpt-4o-mini"));
        assert_eq!(c.provider_name.as_deref(), Some("OpenAI"));
        assert_eq!(c.finish_reason.as_deref(), Some("stop"));
        assert_eq!(
            c.usage,
            Some(Usage {
                prompt_tokens: 17,
                completion_tokens: 1,
                total_tokens: 18
            })
        );
        assert!(c.tool_calls.is_empty());
    }

    #[test]
    fn crlf_framing_reads_the_same() {
        let crlf = TEXT_STREAM.replace('\n', "\r\n");
        let (result, deltas) = parse(&crlf);
        assert_eq!(result.unwrap(), parse(TEXT_STREAM).0.unwrap());
        assert_eq!(deltas, ["Hello"]);
    }

    #[test]
    fn every_split_point_gives_the_same_answer() {
        let whole = parse(TEXT_STREAM).0.unwrap();
        let bytes = TEXT_STREAM.replace('\n', "\r\n").into_bytes();
        for cut in 0..=bytes.len() {
            let (result, deltas) = parse_in_pieces(&bytes, &[cut]);
            assert_eq!(result.as_ref(), Ok(&whole), "cut at {cut}");
            assert_eq!(deltas, ["Hello"], "cut at {cut}");
        }
        // One byte at a time: UTF-8 characters (the `…` in the ids) are split too.
        let every: Vec<usize> = (1..bytes.len()).collect();
        assert_eq!(parse_in_pieces(&bytes, &every).0, Ok(whole));
    }

    #[test]
    fn bedrock_zero_argument_tool_call_keeps_empty_arguments() {
        let c = parse(BEDROCK_TOOL_STREAM).0.unwrap();
        assert_eq!(
            c.tool_calls,
            vec![ToolCall {
                id: "toolu_bdrk_01AMXFNuQYF6fxS1hryPtu9K".into(),
                name: "get_all_tabs".into(),
                arguments: String::new(),
                extra_content: None,
            }]
        );
        assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(c.provider_name.as_deref(), Some("Amazon Bedrock"));
        assert_eq!(c.text, "");
        assert_eq!(c.usage.map(|u| u.total_tokens), Some(25160));
    }

    /// Fields a provider requires back on the next request survive the stream: OpenRouter's
    /// `reasoning_details` (array pieces, appended), `reasoning_content` (text pieces, joined)
    /// and Gemini's `extra_content.google.thought_signature` on a tool call.
    #[test]
    fn turn_fields_and_thought_signatures_are_kept_verbatim() {
        let stream = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"Think\",\"reasoning_details\":[{\"type\":\"reasoning.text\",\"text\":\"Think\",\"index\":0}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"ing\",\"reasoning_details\":[{\"type\":\"reasoning.encrypted\",\"data\":\"c2ln\",\"index\":1}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"weather\",\"arguments\":\"{}\"},\"extra_content\":{\"google\":{\"thought_signature\":\"CtACAdHtim9\"}}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let c = parse(stream).0.expect("a completion");
        assert_eq!(
            c.turn_fields["reasoning_content"],
            serde_json::json!("Thinking")
        );
        assert_eq!(
            c.turn_fields["reasoning_details"],
            serde_json::json!([
                {"type": "reasoning.text", "text": "Think", "index": 0},
                {"type": "reasoning.encrypted", "data": "c2ln", "index": 1}
            ])
        );
        assert_eq!(
            c.tool_calls[0].extra_content,
            Some(serde_json::json!({"google": {"thought_signature": "CtACAdHtim9"}}))
        );
    }

    /// Gemini's OpenAI-compatible stream sends parallel calls one per chunk, each whole, without
    /// `index` (google-gemini/gemini-cli and the OpenAI-compatibility docs' parallel function
    /// calling example): two calls, each with its own arguments, never `{…}{…}`.
    #[test]
    fn parallel_calls_without_an_index_stay_separate_calls() {
        let stream = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"weather\",\"arguments\":\"{\\\"city\\\":\\\"北京\\\"}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"weather\",\"arguments\":\"{\\\"city\\\":\\\"上海\\\"}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let (result, _) = parse(stream);
        let calls: Vec<(String, String)> = result
            .expect("a completion")
            .tool_calls
            .into_iter()
            .map(|c| (c.id, c.arguments))
            .collect();
        assert_eq!(
            calls,
            [
                ("call_1".to_string(), r#"{"city":"北京"}"#.to_string()),
                ("call_2".to_string(), r#"{"city":"上海"}"#.to_string()),
            ]
        );
    }

    #[test]
    fn fragmented_arguments_of_parallel_calls_are_joined_by_index() {
        let stream = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"search\",\"arguments\":\"\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"q\\\":\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"fetch\",\"arguments\":\"{}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"joyce\\\"}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let c = parse(stream).0.unwrap();
        let calls: Vec<_> = c
            .tool_calls
            .iter()
            .map(|t| (t.id.as_str(), t.name.as_str(), t.arguments.as_str()))
            .collect();
        assert_eq!(
            calls,
            [
                ("call_a", "search", "{\"q\":\"joyce\"}"),
                ("call_b", "fetch", "{}")
            ]
        );
    }

    #[test]
    fn usage_on_a_second_finish_chunk() {
        let (result, deltas) = parse(USAGE_ON_FINISH_STREAM);
        let c = result.unwrap();
        assert_eq!(deltas, ["Hi", " there"]);
        assert_eq!(c.text, "Hi there");
        assert_eq!(c.finish_reason.as_deref(), Some("stop"));
        assert_eq!(
            c.usage,
            Some(Usage {
                prompt_tokens: 5,
                completion_tokens: 2,
                total_tokens: 7
            })
        );
        assert_eq!(c.provider_name.as_deref(), Some("SiliconFlow"));
    }

    #[test]
    fn mid_stream_error_layout_1_with_or_without_done() {
        for stream in [
            ERROR_LAYOUT_1.to_owned(),
            format!("{ERROR_LAYOUT_1}data: [DONE]\n\n"),
        ] {
            let (result, deltas) = parse(&stream);
            let Err(CallError::InBand { error, partial }) = result else {
                panic!("{result:?}")
            };
            assert_eq!(deltas, ["Par", "tial"]);
            assert_eq!(partial, "Partial");
            assert_eq!(error.code, Some(429));
            assert_eq!(error.message, "Rate limit exceeded");
            assert!(error.is_rate_limit());
            assert_eq!(error.error["metadata"]["error_type"], "rate_limit_exceeded");
        }
    }

    #[test]
    fn mid_stream_error_layout_2_with_or_without_done() {
        let without_done = ERROR_LAYOUT_2.trim_end_matches("data: [DONE]\n\n");
        for stream in [ERROR_LAYOUT_2, without_done] {
            let Err(CallError::InBand { error, partial }) = parse(stream).0 else {
                panic!()
            };
            assert_eq!(partial, "Hi");
            assert_eq!(error.code, Some(500));
            assert_eq!(
                error.message,
                "The server had an error processing your request"
            );
            assert!(!error.is_rate_limit());
        }
    }

    #[test]
    fn string_error_code_is_kept_as_text() {
        let stream = "data: {\"error\":{\"code\":\"server_error\",\"message\":\"boom\"},\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"error\"}]}\n\n";
        let Err(CallError::InBand { error, partial }) = parse(stream).0 else {
            panic!()
        };
        assert_eq!(
            (error.code, error.code_text.as_deref()),
            (None, Some("server_error"))
        );
        assert_eq!(error.message, "boom");
        assert_eq!(partial, "");
    }

    #[test]
    fn numeric_string_code_reads_as_a_number() {
        let stream =
            "data: {\"choices\":[],\"error\":{\"code\":\"429\",\"message\":\"slow down\"}}\n\n";
        let Err(CallError::InBand { error, .. }) = parse(stream).0 else {
            panic!()
        };
        assert_eq!((error.code, error.code_text), (Some(429), None));
    }

    #[test]
    fn finish_reason_error_without_an_error_object_is_still_an_error() {
        let stream = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"error\"}]}\n\ndata: [DONE]\n\n";
        let Err(CallError::InBand { error, .. }) = parse(stream).0 else {
            panic!()
        };
        assert_eq!(error.code, None);
        assert!(error.message.contains("finish_reason"));
    }

    #[test]
    fn eof_without_done_or_finish_is_truncated() {
        let cut = TEXT_STREAM.split("data: {\"id\":\"gen-…\"").next().unwrap();
        assert_eq!(
            parse(cut).0,
            Err(CallError::Transport(TransportError::Truncated))
        );
        assert_eq!(
            parse("").0,
            Err(CallError::Transport(TransportError::Truncated))
        );
        assert_eq!(
            parse(": OPENROUTER PROCESSING\n\n").0,
            Err(CallError::Transport(TransportError::Truncated))
        );
    }

    #[test]
    fn eof_after_a_finish_reason_is_complete() {
        let without_done = TEXT_STREAM.trim_end().trim_end_matches("data: [DONE]");
        let c = parse(without_done).0.unwrap();
        assert_eq!(c.finish_reason.as_deref(), Some("stop"));
        assert_eq!(c.usage.map(|u| u.total_tokens), Some(18));
    }

    #[test]
    fn done_without_a_trailing_newline_counts() {
        let stream = USAGE_ON_FINISH_STREAM.replace("data: [DONE]\n\n", "");
        let stream = format!(
            "{}data: {{\"choices\":[]}}\n\ndata: [DONE]",
            stream.replace("\"finish_reason\":\"stop\"", "\"finish_reason\":null")
        );
        let c = parse(&stream).0.unwrap();
        assert_eq!(c.finish_reason, None);
        assert_eq!(c.text, "Hi there");
    }

    #[test]
    fn bad_json_in_a_data_line_is_malformed() {
        for stream in [
            "data: {\"choices\":[\n\n",
            "data: 42\n\n",
            "data: {\"choices\":{}}\n\n",
            "data: \u{1}\n\n",
        ] {
            assert!(
                matches!(
                    parse(stream).0,
                    Err(CallError::Transport(TransportError::Malformed(_)))
                ),
                "{stream:?}"
            );
        }
        let mut parser = StreamParser::default();
        let invalid_utf8 = parser.feed(b"data: {\"a\":\"\xff\"}\n\n", &mut |_| {});
        assert!(matches!(
            invalid_utf8,
            Err(CallError::Transport(TransportError::Malformed(_)))
        ));
    }

    #[test]
    fn tool_call_without_a_name_is_malformed() {
        let stream = "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n";
        assert!(matches!(
            parse(stream).0,
            Err(CallError::Transport(TransportError::Malformed(_)))
        ));
    }

    #[test]
    fn a_body_cut_inside_its_last_line_is_truncated() {
        let stream = format!(
            "{}data: {{\"choi",
            USAGE_ON_FINISH_STREAM
                .split(
                    "data: {\"id\":\"gen-2\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"}"
                )
                .next()
                .unwrap()
        );
        assert_eq!(
            parse(&stream).0,
            Err(CallError::Transport(TransportError::Truncated))
        );
        let cut_utf8 = &"data: {\"choices\":[{\"delta\":{\"content\":\"…\"}}]}".as_bytes()[..40];
        assert_eq!(
            parse_in_pieces(cut_utf8, &[]).0,
            Err(CallError::Transport(TransportError::Truncated))
        );
    }

    #[test]
    fn data_after_done_is_ignored() {
        let stream = format!("{TEXT_STREAM}data: not json\n\n");
        assert!(parse(&stream).0.is_ok());
    }

    #[test]
    fn decoder_joins_multi_line_data_and_ignores_other_fields() {
        let mut decoder = SseDecoder::default();
        let mut events = Vec::new();
        decoder
            .feed(
                b"event: message\nid: 1\ndata: a\ndata:b\nretry: 5\n\n: c\n\ndata\n\n",
                &mut events,
            )
            .unwrap();
        let data: Vec<&str> = events.iter().map(|e| e.data.as_str()).collect();
        assert_eq!(data, ["a\nb", ""]);
        assert!(events.iter().all(|e| !e.error));
    }

    /// `event: error` marks only its own event, with or without a space after the colon, and an
    /// error event without data is not dispatched (nor does it mark the next one).
    #[test]
    fn decoder_notes_error_events() {
        let mut decoder = SseDecoder::default();
        let mut events = Vec::new();
        decoder
            .feed(
                b"event:error\ndata: a\n\ndata: b\n\nevent: error\n\ndata: c\n\nevent: error \r\ndata: d\r\n\r\n",
                &mut events,
            )
            .unwrap();
        let seen: Vec<(&str, bool)> = events.iter().map(|e| (e.data.as_str(), e.error)).collect();
        assert_eq!(seen, [("a", true), ("b", false), ("c", false), ("d", true)]);
    }

    fn in_band(stream: &str) -> (InBandErrorParts, String) {
        match parse(stream).0 {
            Err(CallError::InBand { error, partial }) => (
                InBandErrorParts {
                    status: error.carried_status(),
                    rate_limit: error.is_rate_limit(),
                    message: error.message,
                },
                partial,
            ),
            other => panic!("{stream}: {other:?}"),
        }
    }

    #[derive(Debug, PartialEq)]
    struct InBandErrorParts {
        status: u16,
        message: String,
        rate_limit: bool,
    }

    /// DashScope's stream error as pasted in a public issue: `event:error`, a status line that is
    /// no SSE field, and a bare `code` object as its data. A throttle, before any text.
    #[test]
    fn dashscope_error_event_with_a_bare_code_object() {
        let stream = "id:1\nevent:error\nHTTP_STATUS/429 TOO_MANY_REQUESTS\ndata:{\"code\":\"Throttling.AllocationQuota\",\"message\":\"Free allocated quota exceeded.\",\"request_id\":\"a734-xxx-2254f8\"}\n\n";
        let expected = InBandErrorParts {
            status: 429,
            message: "Free allocated quota exceeded.".into(),
            rate_limit: true,
        };
        assert_eq!(in_band(stream), (expected, String::new()));
    }

    /// A bare `code`/`message` object without `choices` is an error with or without its
    /// `event: error`: a throttling code as 429, anything else unknown as 502.
    #[test]
    fn bare_code_or_message_objects_are_in_band_errors() {
        for (data, status, message) in [
            (
                r#"{"code":"Throttling.RateQuota","message":"Requests rate limit exceeded, please try again later.","request_id":"x"}"#,
                429,
                "Requests rate limit exceeded, please try again later.",
            ),
            (
                r#"{"code":"InternalError","message":"An internal error has occured."}"#,
                502,
                "An internal error has occured.",
            ),
            (r#"{"message":"Compute error."}"#, 502, "Compute error."),
            (r#"{"code":"Arrearage"}"#, 502, ""),
        ] {
            let stream = format!(
                "data: {{\"choices\":[{{\"delta\":{{\"content\":\"Hi\"}}}}]}}\n\ndata: {data}\n\n"
            );
            let (parts, partial) = in_band(&stream);
            assert_eq!(
                (parts.status, parts.message.as_str()),
                (status, message),
                "{data}"
            );
            assert_eq!(partial, "Hi", "the text before it is kept");
        }
        // With `choices`, a top-level `message` is no error.
        let ok = "data: {\"message\":\"hello\",\"choices\":[{\"delta\":{\"content\":\"A\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
        assert_eq!(parse(ok).0.unwrap().text, "A");
    }

    /// `event: error` frames hold the error in whatever shape: a chunk with an `error` object (an
    /// OpenAI-compatible gateway, Anthropic's stream, OpenAI's Responses stream) or plain text.
    #[test]
    fn error_events_in_every_shape() {
        for (frame, status, message) in [
            (
                "event: error\ndata: {\"error\":{\"message\":\"messages[0].content must be a string\",\"type\":\"invalid_request_error\",\"code\":\"upstream_bad_request\",\"param\":\"\"}}\n\ndata: [DONE]\n\n",
                502,
                "messages[0].content must be a string",
            ),
            (
                "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"Number of request tokens has exceeded your per-minute rate limit\"}}\n\n",
                429,
                "Number of request tokens has exceeded your per-minute rate limit",
            ),
            (
                "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"service_unavailable_error\",\"code\":\"server_is_overloaded\",\"message\":\"Our servers are currently overloaded. Please try again later.\",\"param\":null},\"sequence_number\":2}\n\n",
                502,
                "Our servers are currently overloaded. Please try again later.",
            ),
            (
                "event: error\ndata: upstream went away\n\n",
                502,
                "upstream went away",
            ),
            ("event: error\ndata: 42\n\n", 502, "42"),
        ] {
            let (parts, partial) = in_band(frame);
            assert_eq!(
                (parts.status, parts.message.as_str()),
                (status, message),
                "{frame}"
            );
            assert!(partial.is_empty());
        }
    }

    /// A non-streamed 200 whose body is a bare error object is an in-band error, not "no choices".
    #[test]
    fn a_bare_error_body_is_an_in_band_error() {
        let body = br#"{"code":"Throttling.RateQuota","message":"Requests rate limit exceeded, please try again later.","request_id":"x"}"#;
        let Err(CallError::InBand { error, .. }) = wire::completion(body) else {
            panic!("an in-band error");
        };
        assert_eq!(error.carried_status(), 429);
        assert_eq!(
            error.message,
            "Requests rate limit exceeded, please try again later."
        );
    }

    /// Arbitrary JSON: scalars, and arrays and objects of them three levels deep.
    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            "\\PC{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-z_]{1,10}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Pieces of streams: SSE framing, chunks of the shapes the assembler reads (text, tool-call
    /// fragments with any index and id, usage, in-band errors), chunks of any JSON in the fields
    /// it reads, and raw bytes.
    fn stream_piece() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let chunk = (
            prop::option::of(any::<i64>()),
            prop::option::of("\\PC{0,8}"),
            "\\PC{0,12}",
            prop::option::of(any::<u64>()),
        )
            .prop_map(|(index, id, text, tokens)| {
                let mut call = serde_json::json!({"function": {"name": text, "arguments": text}});
                if let Some(i) = index {
                    call["index"] = i.into();
                }
                if let Some(id) = id {
                    call["id"] = id.into();
                }
                let chunk = serde_json::json!({
                    "choices": [{"delta": {"content": text, "tool_calls": [call]}}],
                    "usage": tokens.map(|t| serde_json::json!({"prompt_tokens": t, "completion_tokens": t, "total_tokens": t})),
                });
                format!("data: {chunk}\n\n").into_bytes()
            });
        // Any JSON where the assembler looks: a delta's fields, tool calls, turn fields.
        let any_json = (
            prop::sample::subsequence(
                vec![
                    "content",
                    "tool_calls",
                    "reasoning_details",
                    "reasoning_content",
                    "role",
                ],
                0..=5,
            ),
            prop::collection::vec(json_value(), 5),
        )
            .prop_map(|(keys, values)| {
                let delta: serde_json::Map<String, serde_json::Value> = keys
                    .into_iter()
                    .zip(values)
                    .map(|(k, v)| (k.to_string(), v))
                    .collect();
                let chunk = serde_json::json!({"choices": [{"delta": delta}]});
                format!("data: {chunk}\n\n").into_bytes()
            });
        // The v3 in-band shapes with any JSON where they are read: a bare `code`/`message` object,
        // with or without `choices`, in a data frame or an `event: error` one.
        let bare_error_frame = (
            prop::collection::vec(prop::option::of(json_value()), 3),
            any::<bool>(),
        )
            .prop_map(|(values, error_event)| {
                let mut object = serde_json::Map::new();
                for (key, value) in ["code", "message", "choices"].into_iter().zip(values) {
                    if let Some(value) = value {
                        object.insert(key.into(), value);
                    }
                }
                let event = if error_event { "event: error\n" } else { "" };
                format!("{event}data: {}\n\n", serde_json::Value::Object(object)).into_bytes()
            });
        prop_oneof![
            chunk,
            any_json,
            prop::sample::select(vec![
                &b": OPENROUTER PROCESSING\n\n"[..],
                b"data: [DONE]\n\n",
                b"data: {\"error\":{\"code\":429,\"message\":\"x\"}}\n\n",
                b"data: {\"choices\":[{\"finish_reason\":\"error\"}]}\n\n",
                b"\r\n",
                b"data:",
                b"\n",
                b"event: x\n",
                b"event: error\n",
                b"event:error\r\n",
                b"HTTP_STATUS/429 TOO_MANY_REQUESTS\n",
                b"data: {\"code\":\"Throttling.RateQuota\",\"message\":\"x\"}\n\n",
                b"event: error\ndata: plain text\n\n",
            ])
            .prop_map(<[u8]>::to_vec),
            bare_error_frame,
            prop::collection::vec(any::<u8>(), 0..64),
        ]
    }

    /// Chunks near the shape of text: every field the assembler reads, absent, of its usual type
    /// or of any other; choices of any index, finish reason and delta; deltas with text, tool
    /// calls, the turn fields and keys nobody reads.
    fn chunk_near_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let text = || {
            prop_oneof![
                "\\PC{0,6}".prop_map(Value::from),
                Just(Value::from("say \"hi\"\n")),
                Just(Value::from("")),
                json_value(),
            ]
        };
        let mut delta_keys = vec!["content", "role", "tool_calls", "refusal", "reasoning"];
        delta_keys.extend(crate::chat::TURN_FIELDS);
        let delta = prop_oneof![
            prop::collection::btree_map(prop::sample::select(delta_keys), text(), 0..4).prop_map(
                |m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            ),
            json_value(),
        ];
        let index = prop_oneof![Just(Value::from(0)), Just(Value::from(1)), json_value()];
        let finish = prop_oneof![
            Just(Value::from("stop")),
            Just(Value::from("error")),
            text()
        ];
        let choice = (
            prop::option::of(index),
            prop::option::of(finish),
            prop::option::of(delta),
        )
            .prop_map(|(index, finish, delta)| {
                let mut choice = serde_json::Map::new();
                for (key, value) in [
                    ("index", index),
                    ("finish_reason", finish),
                    ("delta", delta),
                ] {
                    if let Some(value) = value {
                        choice.insert(key.into(), value);
                    }
                }
                Value::Object(choice)
            });
        let choices = prop_oneof![
            prop::collection::vec(choice, 0..3).prop_map(Value::from),
            json_value()
        ];
        (
            prop::collection::vec(prop::option::of(text()), 5),
            prop::option::of(json_value()),
            prop::option::of(json_value()),
            prop::option::of(choices),
        )
            .prop_map(|(names, error, usage, choices)| {
                let mut chunk = serde_json::Map::new();
                let keys = ["id", "model", "provider", "code", "message"];
                for (key, value) in keys.into_iter().zip(names) {
                    if let Some(value) = value {
                        chunk.insert(key.into(), value);
                    }
                }
                for (key, value) in [("error", error), ("usage", usage), ("choices", choices)] {
                    if let Some(value) = value {
                        chunk.insert(key.into(), value);
                    }
                }
                Value::Object(chunk).to_string()
            })
    }

    /// A stream's text chunks take the borrowed path; a chunk with anything more does not.
    #[test]
    fn text_chunks_are_read_without_a_tree_and_others_are_not() {
        let plain = |data: &str| {
            serde_json::from_str::<Object<TextChunk<'_>>>(data).is_ok_and(|c| c.0.is_plain())
        };
        let text_lines: Vec<&str> = TEXT_STREAM
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .collect();
        // Two text chunks and the finish chunk; the usage chunk is not plain.
        assert_eq!(text_lines.iter().filter(|l| plain(l)).count(), 3);
        assert!(plain(
            r#"{"choices":[{"delta":{"content":"a \"quoted\"\nline","refusal":null}}]}"#
        ));
        for more in [
            r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_details":[{"type":"reasoning.text"}]}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#,
            r#"{"choices":[{"finish_reason":"error"}]}"#,
            r#"{"error":{"code":429},"choices":[]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":1}}"#,
            r#"{"choices":[{"delta":{"content":7}}]}"#,
            r#"{"code":"Throttling.RateQuota","message":"x"}"#,
            r#"{"message":"Compute error."}"#,
        ] {
            assert!(!plain(more), "{more}");
        }
    }

    proptest::proptest! {
        // New cases every run of the suite; 2,000 take a few seconds in a debug build.
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2_000, ..Default::default() })]

        /// Any bytes, cut anywhere: the parser answers (a completion or an error), never panics.
        #[test]
        fn no_stream_panics_the_parser(
            pieces in proptest::collection::vec(stream_piece(), 0..12),
            cuts in proptest::collection::vec(proptest::prelude::any::<usize>(), 0..6),
        ) {
            let stream: Vec<u8> = pieces.concat();
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
            cuts.sort_unstable();
            let _ = parse_in_pieces(&stream, &cuts);
            let _ = wire::completion(&stream);
        }

        /// The borrowed path reads a chunk exactly as the general path does: the same text
        /// relayed, the same completion, the same error, after any chunks before it.
        #[test]
        fn the_text_path_agrees_with_the_general_path(
            chunks in proptest::collection::vec(chunk_near_text(), 1..4),
        ) {
            let (mut fast, mut general) = (StreamAssembler::default(), StreamAssembler::default());
            let (mut fast_text, mut general_text) = (Vec::new(), Vec::new());
            for data in &chunks {
                let a = fast.event(data, &mut |t| fast_text.push(t.to_owned()));
                let b = general.any_event(data, &mut |t| general_text.push(t.to_owned()));
                proptest::prop_assert_eq!(format!("{a:?}"), format!("{b:?}"), "{}", data);
                if a.is_err() {
                    break;
                }
            }
            proptest::prop_assert_eq!(fast_text, general_text);
            proptest::prop_assert_eq!(format!("{:?}", fast.completion), format!("{:?}", general.completion));
        }
    }
}
