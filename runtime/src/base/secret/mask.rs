//! Sealed arguments as people see them: masked, with the id of their key.

use serde_json::Value;

/// `param_json` (a record's arguments) with each sealed (`#[secret]`) value shown as
/// `"••• (sealed, key k1)"`: what the console, its JSON API and the command-line tool
/// show. Text that is not JSON is returned as it is.
///
/// ```
/// let stored = r#"{"amount":5,"card":{"$sealed":"k1.AAAA"}}"#;
/// assert_eq!(
///     async_exec::mask_sealed(stored),
///     r#"{"amount":5,"card":"••• (sealed, key k1)"}"#
/// );
/// ```
pub fn mask_sealed(param_json: &str) -> String {
    if !param_json.contains(super::SEALED) {
        return param_json.to_owned();
    }
    match serde_json::from_str::<Value>(param_json) {
        Ok(mut value) => {
            mask_value(&mut value);
            value.to_string()
        }
        Err(_) => param_json.to_owned(),
    }
}

/// `def`'s arguments `params` for `Debug` output: its `#[secret]` parameters shown as
/// `"•••"` whether they are sealed yet or not (a `Call` holds them in plaintext until it
/// is submitted), sealed values masked.
pub(crate) fn for_debug(def: &crate::base::registry::ExecutorDef, params: &str) -> String {
    if def.secrets.is_empty() {
        return mask_sealed(params);
    }
    match serde_json::from_str::<Value>(params) {
        Ok(Value::Object(mut object)) => {
            for field in def.secrets {
                if let Some(value) = object.get_mut(*field) {
                    *value = Value::String("•••".into());
                }
            }
            let mut value = Value::Object(object);
            mask_value(&mut value);
            value.to_string()
        }
        _ => "(arguments hidden: they hold #[secret] parameters)".into(),
    }
}

/// Masks every sealed value inside `value`.
fn mask_value(value: &mut Value) {
    if let Some(sealed) = super::sealed_text(value) {
        let id = sealed.split_once('.').map_or("?", |(id, _)| id);
        *value = Value::String(format!("••• (sealed, key {id})"));
        return;
    }
    match value {
        Value::Object(map) => map.values_mut().for_each(mask_value),
        Value::Array(items) => items.iter_mut().for_each(mask_value),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::mask_sealed;

    #[test]
    fn nested_sealed_values_are_masked_and_the_rest_kept() {
        let stored = r#"{"a":[{"$sealed":"k2.xyz"}],"b":"$sealed","c":1}"#;
        assert_eq!(
            mask_sealed(stored),
            r#"{"a":["••• (sealed, key k2)"],"b":"$sealed","c":1}"#
        );
        assert_eq!(mask_sealed("not json $sealed"), "not json $sealed");
        assert_eq!(mask_sealed(r#"{"x":1}"#), r#"{"x":1}"#);
    }
}
