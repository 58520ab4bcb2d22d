//! The identifiers the store, the coordinator and the wire pass around, as types of their own so
//! a study id, a trajectory id and a digest cannot be mixed up: [`StudyId`], [`TrajectoryId`]
//! and [`Digest`]. Each serializes as the bare string it wraps.
//!
//! A study id is made by the store (a UUID) and a trajectory id by the study's spec (which checks
//! it); neither has a rule of its own beyond that, so any string makes one and an id nothing
//! names is simply unknown. A digest has a rule: 64 lowercase hex characters, checked whenever
//! one is made from text ([`Digest::parse`]). Each reads as the `&str` it wraps (`Deref`), never
//! the other way round: text becomes one of them only through its constructor.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        /// As the string it wraps, quoted: errors name an id the way they name any text.
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl $name {
            pub fn new(id: impl Into<String>) -> Self {
                $name(id.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                $name(id)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                $name(id.to_owned())
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }
    };
}

string_id!(
    /// A study's id, as the store made it when the study was launched.
    StudyId
);

string_id!(
    /// A trajectory's id within its study, as the study's spec names it (base runs get
    /// `<task>#<seed>`).
    TrajectoryId
);

/// A SHA-256 digest as 64 lowercase hex characters: how a file, a payload, a patch or a recorded
/// run is named. Made from content by [`Digest::of`] or from text by [`Digest::parse`], which
/// checks it.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest(String);

/// Text that is not a SHA-256 digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} is not a SHA-256 digest (64 lowercase hex)", shown(.0))]
pub struct InvalidDigest(pub String);

/// `s` quoted, cut to its first 80 characters: an error names what was wrong without echoing a
/// megabyte of it.
fn shown(s: &str) -> String {
    match s.char_indices().nth(80) {
        None => format!("{s:?}"),
        Some((end, _)) => format!("{:?}…", &s[..end]),
    }
}

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        let digest = Sha256::digest(bytes);
        let mut out = String::with_capacity(64);
        for b in digest {
            out.push_str(&format!("{b:02x}"));
        }
        Digest(out)
    }

    /// `s` as a digest, if it is 64 lowercase hex characters.
    pub fn parse(s: &str) -> Result<Digest, InvalidDigest> {
        if is_digest(s) { Ok(Digest(s.to_owned())) } else { Err(InvalidDigest(s.to_owned())) }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// Whether `s` is a SHA-256 hex digest (64 lowercase hex characters).
pub fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Digest {
    type Err = InvalidDigest;

    fn from_str(s: &str) -> Result<Digest, InvalidDigest> {
        Digest::parse(s)
    }
}

impl TryFrom<String> for Digest {
    type Error = InvalidDigest;

    fn try_from(s: String) -> Result<Digest, InvalidDigest> {
        if is_digest(&s) { Ok(Digest(s)) } else { Err(InvalidDigest(s)) }
    }
}

impl TryFrom<&str> for Digest {
    type Error = InvalidDigest;

    fn try_from(s: &str) -> Result<Digest, InvalidDigest> {
        Digest::parse(s)
    }
}

impl From<Digest> for String {
    fn from(d: Digest) -> String {
        d.0
    }
}

impl Deref for Digest {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Digest {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Digest {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for Digest {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Digest {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for Digest {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn a_digest_is_the_sha256_of_its_content_in_lowercase_hex() {
        assert_eq!(Digest::of(b"").as_str(), EMPTY);
        assert_eq!(Digest::parse(EMPTY).unwrap(), Digest::of(b""));
        assert_eq!(EMPTY.parse::<Digest>().unwrap().to_string(), EMPTY);
    }

    #[test]
    fn text_that_is_not_a_digest_is_refused_and_named() {
        for bad in
            ["", "not-a-digest", &EMPTY.to_uppercase(), &EMPTY[1..], &format!("{EMPTY}0"), &EMPTY.replace('e', "g")]
        {
            let err = Digest::parse(bad).unwrap_err();
            assert_eq!(err.to_string(), format!("{bad:?} is not a SHA-256 digest (64 lowercase hex)"));
        }
        let long = "x".repeat(10_000);
        let err = Digest::parse(&long).unwrap_err().to_string();
        assert!(err.len() < 200 && err.starts_with("\"xxx") && err.contains('…'), "{err}");
    }

    #[test]
    fn ids_and_digests_serialize_as_their_bare_strings_and_digests_are_checked_on_the_way_in() {
        assert_eq!(serde_json::to_string(&StudyId::new("s-1")).unwrap(), "\"s-1\"");
        assert_eq!(serde_json::from_str::<TrajectoryId>("\"a\"").unwrap(), TrajectoryId::from("a"));
        assert_eq!(serde_json::to_string(&Digest::of(b"")).unwrap(), format!("\"{EMPTY}\""));
        assert_eq!(serde_json::from_str::<Digest>(&format!("\"{EMPTY}\"")).unwrap(), Digest::of(b""));
        let err = serde_json::from_str::<Digest>("\"abc\"").unwrap_err().to_string();
        assert!(err.contains("\"abc\" is not a SHA-256 digest"), "{err}");
    }

    #[test]
    fn ids_compare_with_their_text() {
        let id = StudyId::from("s");
        assert_eq!(id, "s");
        assert_eq!("s", id);
        assert_eq!(&*id, "s");
        assert_eq!(format!("{id:?} {id}"), "\"s\" s");
        let d = Digest::of(b"");
        assert_eq!(format!("{d:?}"), format!("{EMPTY:?}"));
        assert_eq!(d, EMPTY);
        assert_eq!(d, String::from(EMPTY));
    }
}
