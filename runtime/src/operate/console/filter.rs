//! The request filter as pages and the API receive it (query string or form fields),
//! turned into a [`RequestQuery`] and back into a query string for links.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::base::query::{Cursor, Order, PageSpec, RequestQuery};
use crate::base::record::Status;

/// The filter fields; empty fields are ignored. Times are RFC 3339 (`2026-12-01T09:30`,
/// UTC) or unix milliseconds.
///
/// Read on its own (a JSON action's `filter`, the count's query string), a field it does
/// not know is refused, so that a typo cannot widen the filter to every request.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::IntoParams, utoipa::ToSchema)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct FilterForm {
    /// `init`, `running`, `success`, `failed`, `dead` or `cancelled`.
    #[serde(default, skip_serializing_if = "is_blank", deserialize_with = "text")]
    pub(crate) status: Option<String>,
    /// An executor's stable name.
    #[serde(default, skip_serializing_if = "is_blank", deserialize_with = "text")]
    pub(crate) executor: Option<String>,
    /// An application name (the runtime's own when empty).
    #[serde(default, skip_serializing_if = "is_blank", deserialize_with = "text")]
    pub(crate) application: Option<String>,
    /// An idempotency key, exactly.
    #[serde(default, skip_serializing_if = "is_blank", deserialize_with = "text")]
    pub(crate) key: Option<String>,
    /// A request id.
    #[serde(default, skip_serializing_if = "is_blank", deserialize_with = "text")]
    pub(crate) id: Option<String>,
    /// Text the remark contains.
    #[serde(default, skip_serializing_if = "is_blank", deserialize_with = "text")]
    pub(crate) remark: Option<String>,
    /// Text the last error contains.
    #[serde(default, skip_serializing_if = "is_blank", deserialize_with = "text")]
    pub(crate) error: Option<String>,
    /// Created at or after.
    #[serde(default, skip_serializing_if = "is_blank", deserialize_with = "text")]
    pub(crate) from: Option<String>,
    /// Created before.
    #[serde(default, skip_serializing_if = "is_blank", deserialize_with = "text")]
    pub(crate) to: Option<String>,
    /// A tag, exactly (`subscription:42`).
    #[serde(default, skip_serializing_if = "is_blank", deserialize_with = "text")]
    pub(crate) tag: Option<String>,
    /// A value in the arguments: `path:value`, the path the names of nested fields joined
    /// by dots (`user.id:42`).
    #[serde(default, skip_serializing_if = "is_blank", deserialize_with = "text")]
    pub(crate) arg: Option<String>,
    /// `on` (or `true`): the remark and last error in any case.
    #[serde(default, skip_serializing_if = "is_blank", deserialize_with = "text")]
    pub(crate) any_case: Option<String>,
}

/// The names of the fields, for a query string read with others.
pub(crate) const FIELDS: [&str; 12] = [
    "status",
    "executor",
    "application",
    "key",
    "id",
    "remark",
    "error",
    "from",
    "to",
    "tag",
    "arg",
    "any_case",
];

/// The names of the paging fields ([`PageForm`]).
pub(crate) const PAGE_FIELDS: [&str; 3] = ["order", "after", "limit"];

/// Refuses a query string that names a field none of `known` holds (read with
/// `#[serde(flatten)]`, which ignores what it does not know, a typo such as `stauts=dead`
/// would list every request): the message names the field and the ones read. A query
/// string that does not parse is left to the handler's extractor to refuse.
pub(crate) fn known_fields_only(query: Option<&str>, known: &[&[&str]]) -> Result<(), String> {
    let Ok(pairs) = serde_urlencoded::from_str::<Vec<(String, String)>>(query.unwrap_or("")) else {
        return Ok(());
    };
    let is_known = |name: &str| known.iter().any(|names| names.contains(&name));
    match pairs.iter().find(|(name, _)| !is_known(name)) {
        None => Ok(()),
        Some((name, _)) => Err(format!(
            "unknown field {:?}: the fields read here are {}",
            crate::base::text::capped(name, 64),
            known.concat().join(", ")
        )),
    }
}

/// A field's text: a string, or a number written as one (`"id": 42` in JSON).
fn text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    struct Text;
    impl serde::de::Visitor<'_> for Text {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string or a number")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    deserializer.deserialize_any(Text)
}

fn is_blank(value: &Option<String>) -> bool {
    !matches!(value.as_deref(), Some(v) if !v.is_empty())
}

fn set(value: &Option<String>) -> Option<String> {
    value.clone().filter(|v| !v.is_empty())
}

/// A time field: unix ms, or RFC 3339 in UTC (seconds and zone optional).
fn parse_time(field: &str, text: &str) -> Result<i64, String> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let mut normal = text.trim().replace(' ', "T");
    if normal.len() == 16 {
        normal.push_str(":00");
    }
    humantime::parse_rfc3339_weak(&normal)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as i64)
        .ok_or_else(|| {
            format!(
                "`{field}` = `{text}`: write a time as 2026-12-01T09:30 (UTC) or unix milliseconds"
            )
        })
}

impl FilterForm {
    /// The query, or what is wrong with a field.
    pub(crate) fn to_query(&self) -> Result<RequestQuery, String> {
        let mut query = RequestQuery::default();
        if let Some(status) = set(&self.status) {
            let names: Vec<&str> = Status::ALL.iter().map(|s| s.as_str()).collect();
            query.status = Some(Status::from_str(&status).map_err(|_| {
                format!("unknown status `{status}`: use one of {}", names.join(", "))
            })?);
        }
        query.executor = set(&self.executor);
        query.application = set(&self.application);
        query.key = set(&self.key);
        if let Some(id) = set(&self.id) {
            query.id = Some(
                id.trim()
                    .parse()
                    .map_err(|_| format!("id `{id}`: a request id is a whole number"))?,
            );
        }
        query.tag = set(&self.tag);
        if let Some(arg) = set(&self.arg) {
            let Some((path, value)) = arg.split_once(':') else {
                return Err(format!(
                    "arg `{arg}`: write the path and the value as `user.id:42`"
                ));
            };
            query.arg = Some((path.trim().to_string(), value.to_string()));
            if let Some(Err(reason)) = query.arg_path() {
                return Err(reason);
            }
        }
        query.any_case = matches!(set(&self.any_case).as_deref(), Some("on" | "true" | "1"));
        query.remark = set(&self.remark);
        query.error = set(&self.error);
        if let Some(from) = set(&self.from) {
            query.created_from = Some(parse_time("from", &from)?);
        }
        if let Some(to) = set(&self.to) {
            query.created_to = Some(parse_time("to", &to)?);
        }
        Ok(query)
    }

    /// The filter as a query string (without `?`), for links that keep it.
    pub(crate) fn to_query_string(&self) -> String {
        serde_urlencoded::to_string(self).unwrap_or_default()
    }

    /// Whether any field is set.
    pub(crate) fn is_empty(&self) -> bool {
        self.to_query_string().is_empty()
    }
}

/// Paging fields of a listing.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct PageForm {
    /// `newest` (default) or `oldest` first.
    #[serde(default)]
    pub(crate) order: Option<String>,
    /// The cursor of the last request of the page before (its id).
    #[serde(default)]
    pub(crate) after: Option<String>,
    /// Requests per page, 1 to 1,000 (default 50).
    #[serde(default)]
    pub(crate) limit: Option<String>,
}

impl PageForm {
    pub(crate) fn to_page(&self) -> Result<PageSpec, String> {
        let order = match self.order.as_deref().filter(|o| !o.is_empty()) {
            None | Some("newest") => Order::Newest,
            Some("oldest") => Order::Oldest,
            Some(other) => return Err(format!("order `{other}`: use `newest` or `oldest`")),
        };
        let after = match self.after.as_deref().filter(|a| !a.is_empty()) {
            None => None,
            Some(text) => Some(Cursor::parse(text).ok_or_else(|| {
                format!("cursor `{text}`: use the `next` cursor of the page before")
            })?),
        };
        let limit = match self.limit.as_deref().filter(|l| !l.is_empty()) {
            None => PageSpec::DEFAULT_LIMIT,
            Some(text) => text
                .parse()
                .ok()
                .filter(|l| (1..=PageSpec::MAX_LIMIT).contains(l))
                .ok_or_else(|| {
                    format!(
                        "limit `{text}`: ask for 1 to {} requests a page",
                        PageSpec::MAX_LIMIT
                    )
                })?,
        };
        let mut page = PageSpec::default().order(order).limit(limit);
        page.after = after;
        Ok(page)
    }
}

/// `text` for a query string.
pub(crate) fn urlencode(text: &str) -> String {
    serde_urlencoded::to_string([("", text)])
        .map(|s| s.trim_start_matches('=').to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_fields_are_ignored_and_bad_ones_explained() {
        let form = FilterForm {
            status: Some("".into()),
            executor: Some("mail".into()),
            ..Default::default()
        };
        let query = form.to_query().unwrap();
        assert_eq!(query.status, None);
        assert_eq!(query.executor.as_deref(), Some("mail"));
        assert_eq!(form.to_query_string(), "executor=mail");
        let bad = FilterForm {
            status: Some("deadd".into()),
            ..Default::default()
        };
        assert!(bad.to_query().unwrap_err().contains("dead, cancelled"));
    }

    #[test]
    fn times_read_as_rfc3339_or_milliseconds() {
        assert_eq!(parse_time("from", "1000").unwrap(), 1000);
        assert_eq!(parse_time("from", "1970-01-01T00:01").unwrap(), 60_000);
        assert!(parse_time("from", "yesterday").is_err());
    }
}
