//! Character classes used by the pre-tokenizers, and the GPT-2 byte <-> char mapping.
//!
//! llama.cpp classifies code points by their Unicode general category (letter, number,
//! punctuation, ...) plus the `White_Space` property, and its pre-tokenizer regexes only ever
//! ask "is it whitespace / a letter / a number / punctuation". [`classify`] answers exactly
//! those questions. The general category comes from the `unicode-general-category` crate
//! (Unicode 16); llama.cpp generates its table from the UCD as well, so the two agree except
//! possibly on code points assigned in very recent Unicode versions.

use unicode_general_category::{get_general_category, GeneralCategory as G};

/// The class of one code point, as far as the pre-tokenizer regexes can tell them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CharClass {
    /// `White_Space` (never also a letter, number or punctuation).
    Space,
    /// General category L*.
    Letter,
    /// General category N*.
    Number,
    /// General category P*.
    Punct,
    /// Everything else: symbols, marks, controls, format characters, unassigned.
    Other,
}

impl CharClass {
    /// Not whitespace, not a letter, not a number: the `[^\s\p{L}\p{N}]` class.
    #[inline]
    pub(crate) fn is_other_or_punct(self) -> bool {
        matches!(self, CharClass::Punct | CharClass::Other)
    }
}

/// `White_Space` code points, as llama.cpp lists them (PropList.txt).
#[inline]
fn is_white_space(cp: u32) -> bool {
    matches!(
        cp,
        0x09..=0x0D
            | 0x20
            | 0x85
            | 0xA0
            | 0x1680
            | 0x2000..=0x200A
            | 0x2028
            | 0x2029
            | 0x202F
            | 0x205F
            | 0x3000
    )
}

const fn ascii_class(b: u8) -> CharClass {
    match b {
        0x09..=0x0D | b' ' => CharClass::Space,
        b'a'..=b'z' | b'A'..=b'Z' => CharClass::Letter,
        b'0'..=b'9' => CharClass::Number,
        // ASCII punctuation per the Unicode general category (Pc Pd Ps Pe Po); the remaining
        // printable non-alphanumerics ($ + < = > ^ ` | ~) are symbols.
        b'!' | b'"' | b'#' | b'%' | b'&' | b'\'' | b'(' | b')' | b'*' | b',' | b'-' | b'.'
        | b'/' | b':' | b';' | b'?' | b'@' | b'[' | b'\\' | b']' | b'_' | b'{' | b'}' => {
            CharClass::Punct
        }
        _ => CharClass::Other,
    }
}

static ASCII_CLASSES: [CharClass; 128] = {
    let mut t = [CharClass::Other; 128];
    let mut i = 0;
    while i < 128 {
        t[i] = ascii_class(i as u8);
        i += 1;
    }
    t
};

/// Classifies one code point.
#[inline]
pub(crate) fn classify(c: char) -> CharClass {
    let cp = c as u32;
    if cp < 128 {
        return ASCII_CLASSES[cp as usize];
    }
    if is_white_space(cp) {
        return CharClass::Space;
    }
    match get_general_category(c) {
        G::UppercaseLetter
        | G::LowercaseLetter
        | G::TitlecaseLetter
        | G::ModifierLetter
        | G::OtherLetter => CharClass::Letter,
        G::DecimalNumber | G::LetterNumber | G::OtherNumber => CharClass::Number,
        G::ConnectorPunctuation
        | G::DashPunctuation
        | G::OpenPunctuation
        | G::ClosePunctuation
        | G::InitialPunctuation
        | G::FinalPunctuation
        | G::OtherPunctuation => CharClass::Punct,
        _ => CharClass::Other,
    }
}

/// The GPT-2 byte-level mapping: every byte is shown as one printable code point. Printable
/// Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in byte order.
pub(crate) struct ByteMap {
    /// Indexed by code point for code points below 0x144; `None` where the char is not used.
    char_to_byte: [Option<u8>; 0x144],
}

impl ByteMap {
    pub(crate) fn new() -> ByteMap {
        let mut char_to_byte = [None; 0x144];
        let printable = |b: u32| {
            (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
        };
        let mut n = 0u32;
        for b in 0u32..256 {
            let cp = if printable(b) {
                b
            } else {
                n += 1;
                255 + n
            };
            char_to_byte[cp as usize] = Some(b as u8);
        }
        ByteMap { char_to_byte }
    }

    #[inline]
    pub(crate) fn byte_of(&self, c: char) -> Option<u8> {
        self.char_to_byte.get(c as usize).copied().flatten()
    }

    /// Decodes a byte-level token text to raw bytes; `None` if a char is outside the mapping.
    pub(crate) fn decode(&self, text: &str) -> Option<Vec<u8>> {
        text.chars().map(|c| self.byte_of(c)).collect()
    }
}

/// C `isspace` in the "C" locale.
#[inline]
pub(crate) fn c_isspace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_round_trips() {
        let m = ByteMap::new();
        assert_eq!(m.byte_of('\u{120}'), Some(b' ')); // Ġ
        assert_eq!(m.byte_of('\u{10A}'), Some(b'\n')); // Ċ
        assert_eq!(m.byte_of('a'), Some(b'a'));
        let mut seen = [false; 256];
        for cp in 0..0x144u32 {
            if let Some(b) = char::from_u32(cp).and_then(|c| m.byte_of(c)) {
                assert!(!seen[b as usize]);
                seen[b as usize] = true;
            }
        }
        assert!(seen.iter().all(|&x| x));
        assert_eq!(m.byte_of('▁'), None);
    }

    #[test]
    fn classes() {
        assert_eq!(classify('a'), CharClass::Letter);
        assert_eq!(classify('北'), CharClass::Letter);
        assert_eq!(classify('²'), CharClass::Number);
        assert_eq!(classify('٣'), CharClass::Number);
        assert_eq!(classify('\u{3000}'), CharClass::Space);
        assert_eq!(classify('\u{A0}'), CharClass::Space);
        assert_eq!(classify('\u{85}'), CharClass::Space);
        assert_eq!(classify('\u{200B}'), CharClass::Other);
        assert_eq!(classify('«'), CharClass::Punct);
        assert_eq!(classify('$'), CharClass::Other);
        assert_eq!(classify('_'), CharClass::Punct);
        assert_eq!(classify('\u{301}'), CharClass::Other);
        assert_eq!(classify('😀'), CharClass::Other);
    }
}
