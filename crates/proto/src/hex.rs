//! Lower-case hex of bytes: digests and secrets as they are written down.

/// `bytes` as lower-case hex, two digits a byte.
#[must_use]
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _infallible = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn two_lower_case_digits_a_byte() {
        assert_eq!(super::hex(&[0, 0xab, 0x0f]), "00ab0f");
        assert_eq!(super::hex(&[]), "");
    }
}
