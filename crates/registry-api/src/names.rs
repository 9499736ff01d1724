//! Names and secrets: what a name of a node, device, function, instance or accelerator
//! may contain, and how a token is compared.

/// Longest name of a node, device, function, instance or accelerator.
pub const NAME_BYTES_MAX: usize = 128;
/// Longest free-text field (vendor, platform, hash).
pub const TEXT_BYTES_MAX: usize = 256;

/// Checks a name: 1..=128 bytes of ASCII letters, digits, `.`, `_` and `-`, so it is
/// safe in a URL path, a metric label and a store key without escaping. `what` names
/// the field in the error sentence.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Err(format!(
            "{what} must be 1 to {NAME_BYTES_MAX} bytes long, got {}",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "{what} {name:?} has {c:?}: only letters, digits, '.', '_' and '-' are allowed"
        ));
    }
    Ok(())
}

/// Checks a free-text field: at most [`TEXT_BYTES_MAX`] bytes, no control character.
pub fn check_text(what: &str, text: &str) -> Result<(), String> {
    if text.len() > TEXT_BYTES_MAX {
        return Err(format!("{what} is longer than {TEXT_BYTES_MAX} bytes"));
    }
    if text.chars().any(char::is_control) {
        return Err(format!("{what} contains a control character"));
    }
    Ok(())
}

/// Compares a token without stopping at the first differing byte, so response timing
/// does not tell how much of a guess was right (only the length shows).
pub fn secret_eq(given: &str, want: &str) -> bool {
    let (given, want) = (given.as_bytes(), want.as_bytes());
    given.len() == want.len()
        && given
            .iter()
            .zip(want)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_url_and_label_safe() {
        assert!(check_name("node", "node-1.a_b").is_ok());
        assert!(check_name("node", "").is_err());
        assert!(check_name("node", &"x".repeat(NAME_BYTES_MAX)).is_ok());
        assert!(check_name("node", &"x".repeat(NAME_BYTES_MAX + 1)).is_err());
        let err = check_name("node", "a/b").unwrap_err();
        assert!(err.contains("'/'"), "{err}");
        assert!(check_name("node", "a b").is_err());
        assert!(check_name("node", "é").is_err());
    }

    #[test]
    fn texts_are_bounded_and_printable() {
        assert!(check_text("vendor", "Intel(R) Corporation").is_ok());
        assert!(check_text("vendor", &"v".repeat(TEXT_BYTES_MAX + 1)).is_err());
        assert!(check_text("vendor", "a\nb").is_err());
    }

    #[test]
    fn tokens_compare_in_full() {
        assert!(secret_eq("abc", "abc"));
        assert!(!secret_eq("abd", "abc"));
        assert!(!secret_eq("ab", "abc"));
        assert!(!secret_eq("", "abc"));
    }
}
