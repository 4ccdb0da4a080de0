//! `worker classify` (docs/design.md §3): the classification table, for people.
//!
//! Someone looking at a provider's refusal (a `curl -i` capture, a log excerpt) wants to know what
//! freeway would make of it without running a job: the verdict, what would rest and for how long,
//! and which rule decided. This reads a raw HTTP response (status line, headers, blank line, body),
//! classifies it for one route with the very functions the engine uses, and prints one JSON line.

use freeway::catalog::Catalog;
use freeway::classify::{Classification, classify_response};
use freeway::headers::Headers;
use freeway::route::Route;
use std::fmt;
use std::io::Read;
use std::process::ExitCode;

/// Why the input could not be classified.
#[derive(Debug, Clone, PartialEq, Eq)]
enum InputError {
    BadRoute(String),
    Empty,
    NoStatusLine(String),
    BadHeader { line: usize, text: String },
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::BadRoute(e) => write!(f, "bad --route: {e}"),
            InputError::Empty => f.write_str("no HTTP response on stdin"),
            InputError::NoStatusLine(line) => write!(
                f,
                "expected a status line such as `HTTP/1.1 429 Too Many Requests`, got {line:?}"
            ),
            InputError::BadHeader { line, text } => {
                write!(
                    f,
                    "line {line} is neither a header nor a blank line: {text:?}"
                )
            }
        }
    }
}

/// A response as read from the raw text.
struct RawResponse<'a> {
    status: u16,
    headers: Headers,
    body: &'a [u8],
}

/// `worker classify --route R`: reads the response on stdin, prints its classification.
pub(crate) fn main(route: &str) -> ExitCode {
    let mut raw = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut raw) {
        eprintln!("worker classify: cannot read stdin: {e}");
        return ExitCode::from(2);
    }
    let vars = std::env::vars().collect();
    let catalog = match freeway::catalog::load(&vars) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("worker classify: {e}");
            return ExitCode::from(2);
        }
    };
    match run(route, &raw, &catalog, freeway::clock::epoch_ms()) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("worker classify: {e}");
            ExitCode::from(2)
        }
    }
}

/// Classify the raw response `raw` for `--route route_arg` at `now_ms`; one JSON line, or a
/// one-line message saying what is wrong with the input.
pub(crate) fn run(
    route_arg: &str,
    raw: &[u8],
    catalog: &Catalog,
    now_ms: u64,
) -> Result<String, String> {
    let route = Route::parse(route_arg, catalog)
        .map_err(|e| InputError::BadRoute(e.to_string()).to_string())?;
    let response = parse(raw).map_err(|e| e.to_string())?;
    let c = classify_response(
        response.status,
        &response.headers,
        response.body,
        &route,
        now_ms,
    );
    Ok(render(&c, now_ms))
}

/// `{"verdict":…,"scope":…,"rest_s":N,"rule":…}`, plus `"evidence":true` for an ambiguous
/// verdict on a shared route and `"day":true` for a spent day. Keys in this order, for people
/// reading it.
fn render(c: &Classification, now_ms: u64) -> String {
    let text = |s: &str| serde_json::Value::from(s).to_string();
    let evidence = if c.evidence { ",\"evidence\":true" } else { "" };
    let day = if c.day { ",\"day\":true" } else { "" };
    format!(
        "{{\"verdict\":{},\"scope\":{},\"rest_s\":{},\"rule\":{}{evidence}{day}}}",
        text(c.verdict.as_str()),
        text(&c.scope.to_string()),
        c.rest_ms(now_ms).div_ceil(1000),
        text(c.rule),
    )
}

/// Read a raw response. Interim `1xx` heads (as `curl -i` shows them) are skipped; a body that
/// starts right after the headers without its blank line is still taken as the body.
fn parse(raw: &[u8]) -> Result<RawResponse<'_>, InputError> {
    let mut rest = trim_start(raw);
    if rest.is_empty() {
        return Err(InputError::Empty);
    }
    let mut line_no = 0;
    loop {
        let (status_line, after) = next_line(rest);
        line_no += 1;
        let status =
            status_of(&status_line).ok_or_else(|| InputError::NoStatusLine(status_line.clone()))?;
        let (headers, body, lines) = read_headers(after, line_no)?;
        line_no += lines;
        if (100..200).contains(&status) && trim_start(body).starts_with(b"HTTP/") {
            rest = trim_start(body);
            continue;
        }
        return Ok(RawResponse {
            status,
            headers,
            body,
        });
    }
}

/// `HTTP/1.1 429 Too Many Requests`, `HTTP/2 429`, `HTTP/2.0 429`.
fn status_of(line: &str) -> Option<u16> {
    let mut parts = line.split_ascii_whitespace();
    parts.next().filter(|v| v.starts_with("HTTP/"))?;
    let code = parts.next().filter(|c| c.len() == 3)?;
    code.parse::<u16>().ok().filter(|s| (100..=599).contains(s))
}

/// Header lines up to the blank line; returns the headers, the body and how many lines were read.
fn read_headers(mut rest: &[u8], first_line: usize) -> Result<(Headers, &[u8], usize), InputError> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut lines = 0;
    while !rest.is_empty() {
        let (line, after) = next_line(rest);
        if line.is_empty() {
            return Ok((pairs.into_iter().collect(), after, lines + 1));
        }
        if line.starts_with([' ', '\t']) {
            // An obsolete folded continuation of the previous header's value.
            if let Some((_, value)) = pairs.last_mut() {
                value.push(' ');
                value.push_str(line.trim());
                rest = after;
                lines += 1;
                continue;
            }
        }
        match line.split_once(':') {
            Some((name, value)) if is_token(name) => {
                pairs.push((name.to_string(), value.trim().to_string()));
            }
            _ if line.starts_with(['{', '[', '<']) => {
                return Ok((pairs.into_iter().collect(), rest, lines));
            }
            _ => {
                return Err(InputError::BadHeader {
                    line: first_line + lines + 1,
                    text: line,
                });
            }
        }
        rest = after;
        lines += 1;
    }
    Ok((pairs.into_iter().collect(), rest, lines))
}

/// One line without its `\n` or `\r\n`, and what follows it.
fn next_line(bytes: &[u8]) -> (String, &[u8]) {
    let (line, after) = match bytes.iter().position(|&b| b == b'\n') {
        Some(i) => (&bytes[..i], &bytes[i + 1..]),
        None => (bytes, &bytes[bytes.len()..]),
    };
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    (String::from_utf8_lossy(line).into_owned(), after)
}

fn trim_start(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    &bytes[start..]
}

/// An HTTP header name (RFC 9110 `token`).
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA_FREE: &str = "meta-llama/llama-3.3-70b-instruct:free";
    /// 30 s before the per-minute reset in the A fixtures.
    const NOW: u64 = 1_785_056_670_000;

    const A: &str = "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nX-RateLimit-Limit: 20\r\nX-RateLimit-Remaining: 0\r\nX-RateLimit-Reset: 1785056700000\r\n\r\n{\"error\":{\"message\":\"Rate limit exceeded: free-models-per-min. \",\"code\":429,\"metadata\":{\"provider_name\":null,\"limit_source\":\"openrouter_free_tier_per_minute\"}}}";

    fn json(line: &str) -> serde_json::Value {
        serde_json::from_str(line).expect("one JSON line")
    }

    #[test]
    fn prints_one_json_line_in_the_spec_shape() {
        let line = run(LLAMA_FREE, A.as_bytes(), &Catalog::builtin(), NOW).expect("classified");
        assert_eq!(
            line,
            r#"{"verdict":"account","scope":"pool:openrouter-free","rest_s":30,"rule":"0:limit_source"}"#
        );
    }

    #[test]
    fn reads_http2_lf_lines_and_lowercase_headers() {
        let raw = "HTTP/2 429\nx-ratelimit-reset: 1785056700000\n\n{\"error\":{\"code\":429}}";
        let v =
            json(&run(LLAMA_FREE, raw.as_bytes(), &Catalog::builtin(), NOW).expect("classified"));
        assert_eq!(
            (v["verdict"].as_str(), v["rule"].as_str()),
            (Some("account"), Some("1:x-ratelimit"))
        );
    }

    #[test]
    fn ambiguous_says_so_and_off_quota_routes_name_their_key() {
        let raw = b"HTTP/1.1 429 Too Many Requests\n\n{\"error\":{\"code\":429,\"message\":\"Rate limit exceeded\"}}";
        let v = json(&run(LLAMA_FREE, raw, &Catalog::builtin(), NOW).expect("classified"));
        assert_eq!(v["verdict"], "ambiguous");
        assert_eq!(v["evidence"], true);
        assert_eq!(v["rest_s"], 60);
        assert_eq!(
            v["scope"],
            "route:platform:openrouter/meta-llama/llama-3.3-70b-instruct:free"
        );
        let v = json(&run("x:free@conn_1", raw, &Catalog::builtin(), NOW).expect("classified"));
        assert_eq!(
            (v["verdict"].as_str(), v["scope"].as_str()),
            (Some("route"), Some("route:conn:conn_1/x:free"))
        );
        assert!(v.get("evidence").is_none());
    }

    #[test]
    fn server_errors_rest_nothing() {
        let v = json(
            &run(
                LLAMA_FREE,
                b"HTTP/1.1 503 Service Unavailable\r\n\r\n",
                &Catalog::builtin(),
                NOW,
            )
            .expect("classified"),
        );
        assert_eq!(
            (
                v["verdict"].as_str(),
                v["scope"].as_str(),
                v["rest_s"].as_u64()
            ),
            (Some("server"), Some("none"), Some(0))
        );
    }

    #[test]
    fn skips_interim_responses_and_tolerates_a_missing_blank_line() {
        let raw = format!("HTTP/1.1 100 Continue\r\n\r\n{A}");
        assert_eq!(
            run(LLAMA_FREE, raw.as_bytes(), &Catalog::builtin(), NOW),
            run(LLAMA_FREE, A.as_bytes(), &Catalog::builtin(), NOW)
        );
        let raw = "HTTP/1.1 402 Payment Required\nContent-Type: application/json\n{\"error\":{\"code\":402,\"metadata\":{\"limit_source\":\"openrouter_credits\"}}}";
        let v =
            json(&run(LLAMA_FREE, raw.as_bytes(), &Catalog::builtin(), NOW).expect("classified"));
        assert_eq!(
            (v["verdict"].as_str(), v["rest_s"].as_u64()),
            (Some("billing"), Some(3600))
        );
        let headers_only = "HTTP/1.1 401 Unauthorized\r\nX-Folded: a\r\n  b\r\n";
        let v = json(
            &run(
                LLAMA_FREE,
                headers_only.as_bytes(),
                &Catalog::builtin(),
                NOW,
            )
            .expect("classified"),
        );
        assert_eq!(
            (v["verdict"].as_str(), v["scope"].as_str()),
            (Some("auth"), Some("connection:platform:openrouter"))
        );
    }

    #[test]
    fn bad_input_is_a_one_line_error() {
        for (route, raw) in [
            (LLAMA_FREE, ""),
            (LLAMA_FREE, "   \n"),
            (LLAMA_FREE, "{\"error\":{}}"),
            (LLAMA_FREE, "HTTP/1.1 abc Nope\r\n\r\n"),
            (
                LLAMA_FREE,
                "HTTP/1.1 429 Too Many Requests\r\nnot a header\r\n\r\n",
            ),
            ("bad model", A),
            ("m@bad conn", A),
        ] {
            let e = run(route, raw.as_bytes(), &Catalog::builtin(), NOW).expect_err("bad input");
            assert!(!e.contains('\n') && !e.is_empty(), "{e}");
        }
    }
}
