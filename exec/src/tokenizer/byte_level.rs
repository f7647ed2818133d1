//! The GPT-2 byte-to-unicode alphabet used by byte-level BPE vocabularies.
//!
//! Every byte maps to one printable character: the printable Latin-1 bytes map to
//! themselves, the other 68 to U+0100.. in byte order (space is `Ġ`, newline `Ċ`).

use std::sync::OnceLock;

fn tables() -> &'static ([char; 256], std::collections::HashMap<char, u8>) {
    static T: OnceLock<([char; 256], std::collections::HashMap<char, u8>)> = OnceLock::new();
    T.get_or_init(|| {
        let mut fwd = ['\0'; 256];
        let mut n = 0u32;
        for b in 0..=255u8 {
            let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
            fwd[b as usize] = if printable {
                char::from(b)
            } else {
                let c = char::from_u32(256 + n).expect("U+0100..U+0143 are chars");
                n += 1;
                c
            };
        }
        let inv = fwd.iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
        (fwd, inv)
    })
}

/// The character byte `b` is written as.
pub fn byte_char(b: u8) -> char {
    tables().0[b as usize]
}

/// The bytes a byte-level vocabulary string stands for; `None` if a character is outside
/// the alphabet.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let inv = &tables().1;
    text.chars().map(|c| inv.get(&c).copied()).collect()
}

/// The byte-level spelling of `bytes`.
pub fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| byte_char(b)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alphabet_round_trips() {
        assert_eq!(byte_char(b' '), 'Ġ');
        assert_eq!(byte_char(b'\n'), 'Ċ');
        assert_eq!(byte_char(b'A'), 'A');
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(&encode(&all)).unwrap(), all);
        assert_eq!(decode("a€"), None);
    }
}
