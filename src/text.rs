//! Text from outside (a provider's error message, a queue entry's reason) cut to a size before
//! it is stored, returned or logged: a provider can answer a 7 MB error, and whatever is kept of
//! it is kept in every attempt, event and log line that quotes it.

/// The most of an error text freeway keeps anywhere (docs/design.md §6).
pub const MAX_ERROR_BYTES: usize = 8 * 1024;

/// `text` cut to at most `max` bytes on a character boundary, with `…` when it was cut.
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let marker = "…";
    if max < marker.len() {
        return text[..text.floor_char_boundary(max)].to_string();
    }
    let end = text.floor_char_boundary(max.saturating_sub(marker.len()));
    format!("{}{marker}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_a_character_boundary_and_says_so() {
        assert_eq!(cut("short", 10), "short");
        let long = "é".repeat(10_000);
        let cut_text = cut(&long, MAX_ERROR_BYTES);
        assert!(cut_text.len() <= MAX_ERROR_BYTES);
        assert!(cut_text.ends_with('…'));
        assert!(cut(&long, 2).len() <= 2);
    }
}
