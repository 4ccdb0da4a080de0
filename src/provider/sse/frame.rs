//! The SSE framing: bytes in, event payloads out. Lines may end in LF, CR or CRLF and be cut
//! anywhere (even inside a UTF-8 character); `data` lines of one event are joined, comments and
//! other fields are skipped, and an `event: error` frame is marked as one.

use super::super::wire::malformed;
use crate::provider::CallError;

/// One SSE event: its `data`, and whether its `event` field named it an error.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Event {
    pub data: String,
    pub error: bool,
}

/// The SSE framing: lines (LF or CRLF), `data:` fields joined until a blank line ends the event,
/// `event: error` noted, comments and other fields ignored. A lone CR as line end (legal SSE,
/// unused by providers) is not supported.
#[derive(Debug, Default)]
pub(super) struct SseDecoder {
    /// Bytes after the last complete line; never contains `\n`.
    pending: Vec<u8>,
    /// The event being read.
    event: Event,
    has_data: bool,
}

impl SseDecoder {
    /// Feeds bytes; pushes the payload of every event they complete onto `events`.
    pub(super) fn feed(&mut self, bytes: &[u8], events: &mut Vec<Event>) -> Result<(), CallError> {
        let mut search_from = self.pending.len();
        self.pending.extend_from_slice(bytes);
        let mut line_start = 0;
        while let Some(offset) = self.pending[search_from..].iter().position(|&b| b == b'\n') {
            let end = search_from + offset;
            let line = &self.pending[line_start..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            Self::line(line, &mut self.event, &mut self.has_data, events)?;
            line_start = end + 1;
            search_from = line_start;
        }
        self.pending.drain(..line_start);
        Ok(())
    }

    /// The body ended: a last line without its newline and an event without its blank line still
    /// count, so a stream that ends `data: [DONE]` with no trailing newline is complete.
    pub(super) fn finish(&mut self, events: &mut Vec<Event>) -> Result<(), CallError> {
        let rest = std::mem::take(&mut self.pending);
        let line = rest.strip_suffix(b"\r").unwrap_or(&rest);
        if !line.is_empty() {
            Self::line(line, &mut self.event, &mut self.has_data, events)?;
        }
        Self::line(b"", &mut self.event, &mut self.has_data, events)
    }

    fn line(
        line: &[u8],
        event: &mut Event,
        has_data: &mut bool,
        events: &mut Vec<Event>,
    ) -> Result<(), CallError> {
        if line.is_empty() {
            // As in SSE, an event without data is not dispatched, and its type ends with it.
            let done = std::mem::take(event);
            if *has_data {
                events.push(done);
                *has_data = false;
            }
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if field == b"event" {
            event.error = value.trim_ascii() == b"error";
            return Ok(());
        }
        if field != b"data" {
            return Ok(());
        }
        let value =
            std::str::from_utf8(value).map_err(|_| malformed("stream data is not UTF-8"))?;
        if *has_data {
            event.data.push('\n');
        }
        event.data.push_str(value);
        *has_data = true;
        Ok(())
    }
}
