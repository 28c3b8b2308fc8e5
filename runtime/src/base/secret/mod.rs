//! Sealed arguments: the `#[secret]` parameters of an executor are encrypted in the
//! record (`param_json`) with a key the builder was given, and opened just before the
//! body runs.
//!
//! A sealed value is `{"$sealed": "<key id>.<base64 of nonce and ciphertext>"}` in
//! place of the parameter's JSON value. The cipher is XChaCha20-Poly1305 (random 24-byte
//! nonces); the associated data binds the value to the executor's name and the
//! parameter's name, so that it cannot be moved to another executor or parameter.

mod keys;
mod mask;

pub(crate) use keys::Keyring;
pub use keys::SECRET_KEY_BYTES;
pub(crate) use mask::for_debug;
pub use mask::mask_sealed;

use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{KeyInit, XChaCha20Poly1305, XNonce};
use serde_json::{Map, Value};

use crate::base::error::{Error, Result};
use crate::base::registry::ExecutorDef;

/// The key of a sealed value's object.
pub(crate) const SEALED: &str = "$sealed";

/// The nonce length of XChaCha20-Poly1305.
const NONCE_BYTES: usize = 24;

/// The associated data of `field` of `executor`'s arguments.
fn associated_data(executor: &str, field: &str) -> Vec<u8> {
    format!("async-exec sealed v1\0{executor}\0{field}").into_bytes()
}

impl Keyring {
    /// `params` (the JSON object of `def`'s arguments) with each `#[secret]` parameter
    /// sealed with the sealing key. Arguments of an executor without secrets are returned
    /// as they are.
    pub(crate) fn seal(&self, def: &ExecutorDef, params: &str) -> Result<String> {
        if def.secrets.is_empty() {
            return Ok(params.to_owned());
        }
        let (id, key) = self.sealing().ok_or_else(|| missing_key(def))?;
        let cipher = XChaCha20Poly1305::new(chacha20poly1305::Key::from_slice(key));
        let mut object: Map<String, Value> =
            serde_json::from_str(params).map_err(|source| Error::Serialize {
                executor: def.name,
                source,
            })?;
        for field in def.secrets {
            let Some(value) = object.get_mut(*field) else {
                continue;
            };
            let plaintext = serde_json::to_vec(value).map_err(|source| Error::Serialize {
                executor: def.name,
                source,
            })?;
            let plaintext = zeroize::Zeroizing::new(plaintext);
            let mut nonce = [0u8; NONCE_BYTES];
            rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut nonce);
            let aad = associated_data(def.name, field);
            let sealed = cipher
                .encrypt(
                    XNonce::from_slice(&nonce),
                    Payload {
                        msg: &plaintext,
                        aad: &aad,
                    },
                )
                .map_err(|_| Error::Config {
                    setting: "secret_key",
                    reason: format!("could not seal an argument of `{}`", def.name),
                })?;
            let mut blob = nonce.to_vec();
            blob.extend_from_slice(&sealed);
            let mut wrapper = Map::new();
            wrapper.insert(
                SEALED.into(),
                Value::String(format!("{id}.{}", B64.encode(blob))),
            );
            *value = Value::Object(wrapper);
        }
        Ok(Value::Object(object).to_string())
    }

    /// `params` with every sealed argument opened (`None`: nothing sealed, use them as
    /// they are); `Err` with a message naming the parameter and the key when one does not
    /// open (the record goes `dead`). A value that is not sealed (a record written before
    /// the parameter was marked) is kept.
    pub(crate) fn open(
        &self,
        executor: &str,
        params: &str,
    ) -> std::result::Result<Option<String>, String> {
        if !params.contains(SEALED) {
            return Ok(None);
        }
        let Ok(Value::Object(mut object)) = serde_json::from_str::<Value>(params) else {
            return Ok(None);
        };
        for (field, value) in object.iter_mut() {
            let Some(sealed) = sealed_text(value) else {
                continue;
            };
            let opened = zeroize::Zeroizing::new(self.open_one(executor, field, sealed)?);
            *value = serde_json::from_slice(&opened).map_err(|e| {
                format!("executor `{executor}`: the sealed argument `{field}` opened but is not JSON: {e}")
            })?;
        }
        Ok(Some(Value::Object(object).to_string()))
    }

    fn open_one(
        &self,
        executor: &str,
        field: &str,
        sealed: &str,
    ) -> std::result::Result<Vec<u8>, String> {
        let malformed = || {
            format!(
                "executor `{executor}`: the sealed argument `{field}` is malformed \
                 (expected `<key id>.<base64>`); the record was altered"
            )
        };
        let (id, data) = sealed.split_once('.').ok_or_else(malformed)?;
        let key = self.get(id).ok_or_else(|| {
            format!(
                "executor `{executor}`: the argument `{field}` is sealed with key `{id}`, which \
                 this instance does not have: add it with Builder::secret_key(\"{id}\", ..) \
                 and retry the request"
            )
        })?;
        let blob = B64.decode(data).map_err(|_| malformed())?;
        if blob.len() < NONCE_BYTES {
            return Err(malformed());
        }
        let (nonce, ciphertext) = blob.split_at(NONCE_BYTES);
        let aad = associated_data(executor, field);
        XChaCha20Poly1305::new(chacha20poly1305::Key::from_slice(key))
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| {
                format!(
                    "executor `{executor}`: the argument `{field}` does not open with key \
                     `{id}`: the key under that id is not the one that sealed it, or the \
                     record was altered or sealed for another executor"
                )
            })
    }

    /// Checks that every executor among `defs` with `#[secret]` parameters can seal.
    pub(crate) fn check<'d>(&self, defs: impl IntoIterator<Item = &'d ExecutorDef>) -> Result<()> {
        if self.sealing().is_some() {
            return Ok(());
        }
        let names: Vec<String> = defs
            .into_iter()
            .filter(|def| !def.secrets.is_empty())
            .map(|def| format!("`{}`", def.name))
            .collect();
        if names.is_empty() {
            return Ok(());
        }
        Err(Error::Config {
            setting: "secret_key",
            reason: format!(
                "{} take #[secret] parameters, which are stored encrypted, and no key is \
                 configured: add Builder::secret_key(id, key) or Builder::secret_key_base64(id, \
                 text) (32 random bytes, kept outside the database)",
                names.join(", ")
            ),
        })
    }
}

/// The text of a `{"$sealed": "..."}` object.
pub(crate) fn sealed_text(value: &Value) -> Option<&str> {
    match value {
        Value::Object(map) if map.len() == 1 => map.get(SEALED)?.as_str(),
        _ => None,
    }
}

fn missing_key(def: &ExecutorDef) -> Error {
    Error::Config {
        setting: "secret_key",
        reason: format!(
            "`{}` takes #[secret] parameters and no key is configured: add \
             Builder::secret_key(id, key)",
            def.name
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::registry::tests_support::def_with_secrets;

    static CHARGE: ExecutorDef = def_with_secrets("billing::charge", &["card"]);
    static OTHER: ExecutorDef = def_with_secrets("billing::refund", &["card"]);

    fn ring(ids: &[(&str, u8)]) -> Keyring {
        let mut ring = Keyring::default();
        for (id, byte) in ids {
            ring.add(id, [*byte; 32]);
        }
        ring
    }

    #[test]
    fn seals_only_secret_fields_and_opens_them_back() {
        let ring = ring(&[("k1", 1)]);
        let plain = r#"{"amount":5,"card":"4242 4242 4242 4242"}"#;
        let sealed = ring.seal(&CHARGE, plain).unwrap();
        assert!(!sealed.contains("4242"), "{sealed}");
        assert!(sealed.contains(r#""$sealed":"k1."#), "{sealed}");
        assert!(sealed.contains(r#""amount":5"#), "{sealed}");
        let opened: Value =
            serde_json::from_str(&ring.open(CHARGE.name, &sealed).unwrap().unwrap()).unwrap();
        assert_eq!(opened, serde_json::from_str::<Value>(plain).unwrap());
        // Two seals of one value differ (random nonces).
        assert_ne!(sealed, ring.seal(&CHARGE, plain).unwrap());
    }

    #[test]
    fn a_value_does_not_open_elsewhere_nor_without_its_key() {
        let sealed = ring(&[("k1", 1)])
            .seal(&CHARGE, r#"{"card":"4242"}"#)
            .unwrap();
        let other = ring(&[("k1", 1)]).open(OTHER.name, &sealed).unwrap_err();
        assert!(other.contains("does not open with key `k1`"), "{other}");
        let gone = ring(&[("k2", 2)]).open(CHARGE.name, &sealed).unwrap_err();
        assert!(gone.contains("sealed with key `k1`"), "{gone}");
        assert!(gone.contains("Builder::secret_key"), "{gone}");
        let wrong = ring(&[("k1", 9)]).open(CHARGE.name, &sealed).unwrap_err();
        assert!(wrong.contains("does not open with key `k1`"), "{wrong}");
        assert!(!other.contains("4242") && !gone.contains("4242") && !wrong.contains("4242"));
    }

    #[test]
    fn rotation_seals_with_the_chosen_key_and_opens_with_any() {
        let old = ring(&[("k1", 1)]).seal(&CHARGE, r#"{"card":"1"}"#).unwrap();
        let mut both = ring(&[("k1", 1), ("k2", 2)]);
        both.set_sealing("k2");
        let new = both.seal(&CHARGE, r#"{"card":"2"}"#).unwrap();
        assert!(new.contains("\"k2."), "{new}");
        assert_eq!(
            both.open(CHARGE.name, &old).unwrap().unwrap(),
            r#"{"card":"1"}"#
        );
        assert_eq!(
            both.open(CHARGE.name, &new).unwrap().unwrap(),
            r#"{"card":"2"}"#
        );
    }

    #[test]
    fn plaintext_of_an_older_record_is_kept() {
        let ring = ring(&[("k1", 1)]);
        assert_eq!(ring.open(CHARGE.name, r#"{"card":"1"}"#).unwrap(), None);
    }

    #[test]
    fn no_key_is_a_config_error_naming_the_executor() {
        let error = Keyring::default().check([&CHARGE]).unwrap_err().to_string();
        assert!(error.contains("`billing::charge`"), "{error}");
        assert!(error.contains("secret_key"), "{error}");
        assert!(Keyring::default().check([&OTHER; 0]).is_ok());
    }
}
