//! Integer values as NCCL reads them: `strtoll(value, .., 0)`, so leading blanks, a sign, and C
//! prefixes (0x hex, 0 octal) are accepted. Unlike NCCL, which silently takes "12abc" as 12 and
//! "abc" as 0, a value with no digits or with trailing junk is reported as malformed.

/// Why a value is not a C integer literal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntError {
    /// No digit where the number should start (empty, blank, a lone sign, or letters).
    NoDigits,
    /// Digits followed by something that is not one (in the literal's radix).
    TrailingJunk,
    /// The value does not fit in an i64.
    Overflow,
}

/// Parses a whole C integer literal (surrounding whitespace allowed).
pub fn parse_c_integer(s: &str) -> Result<i64, IntError> {
    let t = s.trim_matches(|c: char| c.is_ascii_whitespace() || c == '\x0b');
    let (negative, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, digits) = if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        if hex.bytes().next().is_some_and(|b| b.is_ascii_hexdigit()) {
            (16, hex)
        } else {
            (8, t) // strtoll reads "0x" without hex digits as the number 0, then junk
        }
    } else if t.starts_with('0') {
        (8, t)
    } else {
        (10, t)
    };
    if digits.is_empty() {
        return Err(IntError::NoDigits);
    }
    let mut value: i64 = 0;
    for (i, c) in digits.char_indices() {
        let Some(d) = c.to_digit(radix) else {
            return Err(if i == 0 { IntError::NoDigits } else { IntError::TrailingJunk });
        };
        // Accumulate negatively so that i64::MIN parses.
        value = value
            .checked_mul(i64::from(radix))
            .and_then(|v| v.checked_sub(i64::from(d)))
            .ok_or(IntError::Overflow)?;
    }
    if negative {
        Ok(value)
    } else {
        value.checked_neg().ok_or(IntError::Overflow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_hex_octal() {
        assert_eq!(parse_c_integer("0"), Ok(0));
        assert_eq!(parse_c_integer("42"), Ok(42));
        assert_eq!(parse_c_integer(" -7 "), Ok(-7));
        assert_eq!(parse_c_integer("+3"), Ok(3));
        assert_eq!(parse_c_integer("0x1F"), Ok(31));
        assert_eq!(parse_c_integer("0X10"), Ok(16));
        assert_eq!(parse_c_integer("010"), Ok(8));
        assert_eq!(parse_c_integer("-9223372036854775808"), Ok(i64::MIN));
        assert_eq!(parse_c_integer("9223372036854775807"), Ok(i64::MAX));
    }

    #[test]
    fn malformed() {
        assert_eq!(parse_c_integer(""), Err(IntError::NoDigits));
        assert_eq!(parse_c_integer("  "), Err(IntError::NoDigits));
        assert_eq!(parse_c_integer("-"), Err(IntError::NoDigits));
        assert_eq!(parse_c_integer("abc"), Err(IntError::NoDigits));
        assert_eq!(parse_c_integer("12abc"), Err(IntError::TrailingJunk));
        assert_eq!(parse_c_integer("09"), Err(IntError::TrailingJunk));
        assert_eq!(parse_c_integer("0xg"), Err(IntError::TrailingJunk));
        assert_eq!(parse_c_integer("1 2"), Err(IntError::TrailingJunk));
        assert_eq!(parse_c_integer("9223372036854775808"), Err(IntError::Overflow));
        assert_eq!(parse_c_integer("ü"), Err(IntError::NoDigits));
    }
}
