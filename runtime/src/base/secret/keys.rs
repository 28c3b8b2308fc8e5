//! The keys that seal and open `#[secret]` arguments, as the builder was given them.

use std::fmt;

use base64::Engine as _;
use zeroize::{Zeroize, Zeroizing};

use crate::base::error::{Error, Result};

/// The length of a secret key: 32 bytes (256 bits).
pub const SECRET_KEY_BYTES: usize = 32;

/// A key's bytes, wiped when dropped (a clone wipes its own copy).
pub(crate) type KeyBytes = Zeroizing<[u8; SECRET_KEY_BYTES]>;

/// Keys by id: the sealing one (the one named by `sealing_key`, else the first added) and
/// every other that opens. Its `Debug` shows the ids only.
#[derive(Clone, Default)]
pub(crate) struct Keyring {
    keys: Vec<(String, KeyBytes)>,
    sealing: Option<String>,
    /// What was wrong with the keys given, reported by `validate` at start.
    problems: Vec<String>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field(
                "ids",
                &self.keys.iter().map(|(id, _)| id).collect::<Vec<_>>(),
            )
            .field("sealing", &self.sealing_id())
            .finish()
    }
}

impl Keyring {
    /// Adds a key (and wipes the copy it was given); a bad id or a second key under one
    /// id is reported at start.
    pub(crate) fn add(&mut self, id: &str, mut key: [u8; SECRET_KEY_BYTES]) {
        let kept = KeyBytes::new(key);
        key.zeroize();
        if id.is_empty()
            || id.len() > 64
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            self.problems.push(format!(
                "key id {id:?} is not 1 to 64 characters of ASCII letters, digits, `-` and `_`"
            ));
            return;
        }
        if self.get(id).is_some() {
            self.problems.push(format!(
                "key id `{id}` is given twice; each id names one key"
            ));
            return;
        }
        self.keys.push((id.to_owned(), kept));
    }

    /// Adds a key given as base64 text (standard alphabet, padding optional).
    pub(crate) fn add_base64(&mut self, id: &str, text: &str) {
        let text = text.trim();
        let decoded = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(text.trim_end_matches('='))
            .ok()
            .map(Zeroizing::new);
        let key =
            decoded.and_then(|bytes| <[u8; SECRET_KEY_BYTES]>::try_from(bytes.as_slice()).ok());
        match key {
            Some(key) => self.add(id, key),
            None => self.problems.push(format!(
                "key `{id}` is not the base64 of {SECRET_KEY_BYTES} bytes (make one with \
                 `openssl rand -base64 {SECRET_KEY_BYTES}`)"
            )),
        }
    }

    /// Names the key that seals new arguments.
    pub(crate) fn set_sealing(&mut self, id: &str) {
        self.sealing = Some(id.to_owned());
    }

    fn sealing_id(&self) -> Option<&str> {
        self.sealing
            .as_deref()
            .or_else(|| self.keys.first().map(|(id, _)| id.as_str()))
    }

    /// The sealing key and its id.
    pub(crate) fn sealing(&self) -> Option<(&str, &[u8; SECRET_KEY_BYTES])> {
        let id = self.sealing_id()?;
        self.get(id).map(|key| (id, key))
    }

    /// The key with this id.
    pub(crate) fn get(&self, id: &str) -> Option<&[u8; SECRET_KEY_BYTES]> {
        self.keys
            .iter()
            .find(|(k, _)| k == id)
            .map(|(_, key)| &**key)
    }

    /// Refuses keys that were given wrong, and a sealing key that was not given.
    pub(crate) fn validate(&self) -> Result<()> {
        let mut problems = self.problems.clone();
        if let Some(id) = &self.sealing {
            if self.get(id).is_none() {
                problems.push(format!(
                    "sealing_key(\"{id}\") names no key: add it with secret_key(\"{id}\", ..)"
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Config {
                setting: "secret_key",
                reason: problems.join("; "),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_keys_are_reported_and_debug_shows_ids_only() {
        let mut ring = Keyring::default();
        ring.add("k1", [7; 32]);
        ring.add("k1", [8; 32]);
        ring.add("bad.id", [1; 32]);
        ring.add_base64("short", "AAAA");
        ring.add_base64(
            "ok",
            &base64::engine::general_purpose::STANDARD.encode([3u8; 32]),
        );
        let error = ring.validate().unwrap_err().to_string();
        for needle in ["given twice", "\"bad.id\"", "key `short` is not the base64"] {
            assert!(error.contains(needle), "{needle} in {error}");
        }
        assert_eq!(ring.get("ok"), Some(&[3; 32]));
        assert_eq!(ring.sealing().map(|(id, _)| id), Some("k1"));
        let debug = format!("{ring:?}");
        assert_eq!(
            debug,
            r#"Keyring { ids: ["k1", "ok"], sealing: Some("k1") }"#
        );

        let mut unnamed = Keyring::default();
        unnamed.set_sealing("k9");
        assert!(unnamed.validate().unwrap_err().to_string().contains("k9"));
    }

    /// Key bytes are wiped when their holder is dropped, not left for the allocator to
    /// hand out (or a core dump to show).
    #[test]
    fn key_bytes_are_wiped_when_dropped() {
        let mut key = std::mem::ManuallyDrop::new(KeyBytes::from([7; SECRET_KEY_BYTES]));
        // SAFETY: dropped once, here; the bytes stay in place (ManuallyDrop) to be read.
        unsafe { std::mem::ManuallyDrop::drop(&mut key) };
        let bytes: &[u8; SECRET_KEY_BYTES] = &key;
        assert_eq!(bytes, &[0; SECRET_KEY_BYTES]);
    }
}
