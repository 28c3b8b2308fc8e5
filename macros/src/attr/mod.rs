//! Typed parser for the arguments of `#[async_exec(...)]`.
//!
//! Syntax errors stop the parse; semantic errors (unknown or duplicate keys, an
//! unknown strategy, a bad timeout, ...) are collected so that one compile shows
//! all of them.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Ident, LitInt, LitStr, Token};

mod modes;
mod values;

use modes::{check_modes, ModeSlots};

pub(crate) use values::find_crate_path;
use values::{
    check_partition, check_strategy, every_millis, parse_max_attempts, parse_timeout_int,
    parse_timeout_str, skip_value, unknown_key, DEADLINE_FORMS, EVERY_FORMS, MAX_NAME_CHARS,
    MAX_QUEUE_CHARS, MAX_REMARK_CHARS, TIMEOUT_FORMS,
};

mod kw {
    syn::custom_keyword!(remark);
    syn::custom_keyword!(name);
    syn::custom_keyword!(max_attempts);
    syn::custom_keyword!(timeout);
    syn::custom_keyword!(queue);
    syn::custom_keyword!(partition);
    syn::custom_keyword!(deadline);
    syn::custom_keyword!(every);
    syn::custom_keyword!(cron);
    syn::custom_keyword!(catch_up);
    syn::custom_keyword!(time_zone);
    syn::custom_keyword!(unique_for);
    syn::custom_keyword!(debounce);
    syn::custom_keyword!(debounce_edge);
}

/// Every key, in the order error messages list them.
pub(crate) const KEYS: &[&str] = &[
    "type",
    "remark",
    "name",
    "max_attempts",
    "timeout",
    "queue",
    "partition",
    "deadline",
    "every",
    "cron",
    "catch_up",
    "time_zone",
    "unique_for",
    "debounce",
    "debounce_edge",
    "crate",
];

/// The strategies `type = ...` accepts, safest first.
pub(crate) const STRATEGIES: &[&str] = &["SaveAsync", "SyncSave", "AsyncSave", "Async", "Thread"];

/// The strategies whose requests a worker claims from the store, and so can be held to
/// a queue's limits (`AsyncSave` runs in memory first, and writes only a failure).
const QUEUED_STRATEGIES: &[&str] = &["SaveAsync"];

/// The parsed arguments of one `#[async_exec(...)]`.
#[derive(Debug)]
pub(crate) struct Args {
    /// `type = <Strategy>`: one of [`STRATEGIES`], with the user's span.
    pub(crate) strategy: Ident,
    /// `remark = "..."`.
    pub(crate) remark: Option<LitStr>,
    /// `name = "..."`: a stable executor name.
    pub(crate) name: Option<LitStr>,
    /// `max_attempts = N`, N >= 1.
    pub(crate) max_attempts: Option<u32>,
    /// `timeout = "30s"` or `timeout = 30`, converted to milliseconds.
    pub(crate) timeout_ms: Option<u64>,
    /// `queue = "payments"`: the queue whose limits the executor's requests share.
    pub(crate) queue: Option<LitStr>,
    /// `partition = tenant_id`: an expression over the call's stored parameters whose
    /// value (`Display`) is the request's partition of its queue.
    pub(crate) partition: Option<syn::Expr>,
    /// `deadline = "10m"` or `deadline = 600`, in milliseconds: a call's request not
    /// started by then goes `dead`.
    pub(crate) deadline_ms: Option<(u64, Span)>,
    /// `every = "30s"` or `cron = "0 */5 * * * *"`: the executor calls itself so.
    pub(crate) schedule: Option<ScheduleArg>,
    /// `catch_up = true`: the last tick missed while no instance ran is called at start.
    pub(crate) catch_up: bool,
    /// `time_zone = "Europe/Paris"`: the zone a `cron` expression's times are read in
    /// (checked when the runtime starts; UTC without it).
    pub(crate) time_zone: Option<LitStr>,
    /// `crate = "path"`: the path of the facade crate.
    pub(crate) crate_path: Option<syn::Path>,
    /// `unique_for = "1h"`, in milliseconds: a call whose arguments equal an earlier
    /// call's within the period gets its request.
    pub(crate) unique_for_ms: Option<(u64, Span)>,
    /// `debounce = "5s"`, in milliseconds: a partition's calls within the window become
    /// one run.
    pub(crate) debounce_ms: Option<(u64, Span)>,
    /// `debounce_edge = "leading"` (true) or `"trailing"` (false, the default).
    pub(crate) debounce_leading: Option<(bool, Span)>,
}

/// `every = ...` or `cron = ...`, with the span of its value.
#[derive(Debug, Clone)]
pub(crate) enum ScheduleArg {
    /// Every so many milliseconds.
    Every(u64, Span),
    /// A cron expression (checked when the runtime starts).
    Cron(LitStr),
}

impl ScheduleArg {
    pub(crate) fn span(&self) -> Span {
        match self {
            ScheduleArg::Every(_, span) => *span,
            ScheduleArg::Cron(lit) => lit.span(),
        }
    }
}

/// Collects errors without stopping the parse.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Returns all errors collected, followed by `last`.
    fn with(mut self, last: syn::Error) -> syn::Error {
        self.push(last);
        self.0.expect("just pushed")
    }
}

/// Records `value` into `slot`, or an error at `key_span` if the key was already given.
/// Sets the schedule once: `every` and `cron` are two ways of giving one.
fn set_schedule(
    errors: &mut Errors,
    slot: &mut Option<Option<ScheduleArg>>,
    key_span: Span,
    value: Option<ScheduleArg>,
) {
    if slot.is_some() {
        errors.push(syn::Error::new(
            key_span,
            "a schedule is given twice: give one `every = ...` or one `cron = ...`",
        ));
    } else {
        *slot = Some(value);
    }
}

fn set_once<T>(errors: &mut Errors, slot: &mut Option<T>, key: &str, key_span: Span, value: T) {
    if slot.is_some() {
        errors.push(syn::Error::new(
            key_span,
            format!("duplicate argument `{key}`; give it only once"),
        ));
    } else {
        *slot = Some(value);
    }
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut errors = Errors::default();
        let mut strategy: Option<Option<Ident>> = None;
        let mut remark = None;
        let mut name = None;
        let mut max_attempts = None;
        let mut timeout_ms = None;
        let mut queue = None;
        let mut partition = None;
        let mut deadline_ms = None;
        let mut schedule = None;
        let mut catch_up: Option<Option<(bool, Span)>> = None;
        let mut time_zone: Option<Option<LitStr>> = None;
        let mut crate_path = None;
        let mut modes = ModeSlots::default();

        while !input.is_empty() {
            if let Err(e) = parse_one(
                input,
                &mut errors,
                &mut strategy,
                &mut remark,
                &mut name,
                &mut max_attempts,
                &mut timeout_ms,
                &mut queue,
                &mut partition,
                &mut deadline_ms,
                &mut schedule,
                &mut catch_up,
                &mut time_zone,
                &mut crate_path,
                &mut modes,
            ) {
                return Err(errors.with(e));
            }
            if input.is_empty() {
                break;
            }
            if let Err(e) = input.parse::<Token![,]>() {
                return Err(errors.with(e));
            }
        }

        let strategy = match strategy {
            Some(Some(strategy)) => Some(strategy),
            // `type` was given but its value was rejected: the error is already recorded.
            Some(None) => None,
            None => {
                errors.push(syn::Error::new(
                    Span::call_site(),
                    "missing `type = ...`; write e.g. #[async_exec(type = SaveAsync)]",
                ));
                None
            }
        };
        // A queue's limits hold in the store's claims: only requests that a worker claims
        // (stored, then run by a worker) can be held to them.
        if let (Some(strategy), Some(Some(queue))) = (&strategy, &queue) {
            if !QUEUED_STRATEGIES.iter().any(|s| strategy == s) {
                errors.push(syn::Error::new(
                    queue.span(),
                    format!(
                        "`queue` limits the requests that workers claim from the store: \
                         `{strategy}` does not go through a claim; use type = SaveAsync with \
                         a queue"
                    ),
                ));
            }
        }
        // A deadline is kept by the store's claims and the record: only a stored request.
        if let (Some(strategy), Some(Some((_, span)))) = (&strategy, &deadline_ms) {
            if !QUEUED_STRATEGIES.iter().any(|s| strategy == s) {
                errors.push(syn::Error::new(
                    *span,
                    format!(
                        "`deadline` is kept by the request's record, which workers claim from \
                         the store: `{strategy}` runs its body at once without one; use \
                         type = SaveAsync with a deadline"
                    ),
                ));
            }
        }
        // A partition is one of a queue's: it exists in the store's claims of the queue.
        if let (Some(strategy), Some(Some(expr))) = (&strategy, &partition) {
            let span = syn::spanned::Spanned::span(expr);
            if !QUEUED_STRATEGIES.iter().any(|s| strategy == s) {
                errors.push(syn::Error::new(
                    span,
                    format!(
                        "`partition` puts each request in a partition of its queue, which the \
                         queue's claims take turns between: `{strategy}` writes no request to \
                         claim; use type = SaveAsync with a queue and a partition"
                    ),
                ));
            } else if queue.is_none() {
                errors.push(syn::Error::new(
                    span,
                    "`partition` is a partition of the executor's queue (its claims take \
                     turns between partitions, `QueueLimits::per_partition` limits each): \
                     name the queue, e.g. #[async_exec(type = SaveAsync, queue = \"webhooks\", \
                     partition = tenant_id)]",
                ));
            } else if let Some(Some(_)) = &schedule {
                errors.push(syn::Error::new(
                    span,
                    "a schedule's ticks are written by the schedule, not by a call, so a \
                     `partition` computed from a call's arguments has none to use: remove \
                     `partition`",
                ));
            }
        }
        if let (None | Some(None), Some(Some((_, span)))) = (&schedule, &catch_up) {
            errors.push(syn::Error::new(
                *span,
                "`catch_up` says what a schedule does with a tick missed while no instance \
                 ran: give it with `every = ...` or `cron = ...`",
            ));
        }
        // Only a cron expression names times of day; `every` counts from the Unix epoch.
        if let (None | Some(None | Some(ScheduleArg::Every(..))), Some(Some(zone))) =
            (&schedule, &time_zone)
        {
            errors.push(syn::Error::new(
                zone.span(),
                "`time_zone` says in which zone the times of a `cron` expression are read: \
                 give it with `cron = ...` (`every` counts periods from the Unix epoch, the \
                 same in every zone)",
            ));
        }
        // A schedule's ticks are stored requests, one per tick (a key each).
        if let (Some(strategy), Some(Some(schedule))) = (&strategy, &schedule) {
            if !QUEUED_STRATEGIES.iter().any(|s| strategy == s) {
                errors.push(syn::Error::new(
                    schedule.span(),
                    format!(
                        "a schedule's ticks are stored requests, one per tick, written by \
                         whichever instance gets there first: `{strategy}` stores none; use \
                         type = SaveAsync with `every` or `cron`"
                    ),
                ));
            }
        }
        check_modes(&mut errors, strategy.as_ref(), &queue, &modes);
        match (errors.0, strategy) {
            (Some(errors), _) => Err(errors),
            (None, Some(strategy)) => Ok(Args {
                strategy,
                remark: remark.flatten(),
                name: name.flatten(),
                max_attempts: max_attempts.flatten(),
                timeout_ms: timeout_ms.flatten(),
                queue: queue.flatten(),
                partition: partition.flatten(),
                deadline_ms: deadline_ms.flatten(),
                schedule: schedule.flatten(),
                catch_up: catch_up.flatten().is_some_and(|(on, _)| on),
                time_zone: time_zone.flatten(),
                crate_path: crate_path.flatten(),
                unique_for_ms: modes.unique_for_ms.flatten(),
                debounce_ms: modes.debounce_ms.flatten(),
                debounce_leading: modes.debounce_leading.flatten(),
            }),
            (None, None) => unreachable!("a missing strategy always records an error"),
        }
    }
}

/// Parses one `key = value`. Values that parse but are invalid are recorded as
/// `None` in their slot (so a later duplicate is still reported) with an error.
#[allow(clippy::too_many_arguments)]
fn parse_one(
    input: ParseStream<'_>,
    errors: &mut Errors,
    strategy: &mut Option<Option<Ident>>,
    remark: &mut Option<Option<LitStr>>,
    name: &mut Option<Option<LitStr>>,
    max_attempts: &mut Option<Option<u32>>,
    timeout_ms: &mut Option<Option<u64>>,
    queue: &mut Option<Option<LitStr>>,
    partition: &mut Option<Option<syn::Expr>>,
    deadline_ms: &mut Option<Option<(u64, Span)>>,
    schedule: &mut Option<Option<ScheduleArg>>,
    catch_up: &mut Option<Option<(bool, Span)>>,
    time_zone: &mut Option<Option<LitStr>>,
    crate_path: &mut Option<Option<syn::Path>>,
    slots: &mut ModeSlots,
) -> syn::Result<()> {
    let lookahead = input.lookahead1();
    if lookahead.peek(kw::unique_for)
        || lookahead.peek(kw::debounce)
        || lookahead.peek(kw::debounce_edge)
    {
        modes::parse_one(input, errors, slots)?;
    } else if lookahead.peek(Token![type]) {
        let key: Token![type] = input.parse()?;
        input.parse::<Token![=]>()?;
        let value: Ident = input.parse()?;
        let value = match check_strategy(&value) {
            Ok(()) => Some(value),
            Err(e) => {
                errors.push(e);
                None
            }
        };
        set_once(errors, strategy, "type", key.span, value);
    } else if lookahead.peek(kw::remark) {
        let key: kw::remark = input.parse()?;
        input.parse::<Token![=]>()?;
        let value: LitStr = input.parse()?;
        let text = value.value();
        let value = if text.chars().count() > MAX_REMARK_CHARS || text.contains('\0') {
            errors.push(syn::Error::new(
                value.span(),
                format!(
                    "`remark` must be at most {MAX_REMARK_CHARS} characters, without NUL; \
                     keep it to a line for people reading the console"
                ),
            ));
            None
        } else {
            Some(value)
        };
        set_once(errors, remark, "remark", key.span, value);
    } else if lookahead.peek(kw::name) {
        let key: kw::name = input.parse()?;
        input.parse::<Token![=]>()?;
        let value: LitStr = input.parse()?;
        let text = value.value();
        let value = if text.trim().is_empty() {
            errors.push(syn::Error::new(
                value.span(),
                "`name` must not be empty; write e.g. name = \"mail.send_welcome\", or leave \
                 `name` out to use `module_path!()::fn_name`",
            ));
            None
        } else if text.chars().count() > MAX_NAME_CHARS || text.contains('\0') {
            errors.push(syn::Error::new(
                value.span(),
                format!(
                    "`name` must be at most {MAX_NAME_CHARS} characters, without NUL (the \
                     tables hold 255); write a shorter stable name, e.g. \"mail.send_welcome\""
                ),
            ));
            None
        } else {
            Some(value)
        };
        set_once(errors, name, "name", key.span, value);
    } else if lookahead.peek(kw::max_attempts) {
        let key: kw::max_attempts = input.parse()?;
        input.parse::<Token![=]>()?;
        let value: LitInt = input.parse()?;
        let value = match parse_max_attempts(&value) {
            Ok(n) => Some(n),
            Err(e) => {
                errors.push(e);
                None
            }
        };
        set_once(errors, max_attempts, "max_attempts", key.span, value);
    } else if lookahead.peek(kw::timeout) {
        let key: kw::timeout = input.parse()?;
        input.parse::<Token![=]>()?;
        let value = if input.peek(LitStr) {
            parse_timeout_str(&input.parse()?)
        } else if input.peek(LitInt) {
            parse_timeout_int(&input.parse()?)
        } else {
            return Err(input.error(TIMEOUT_FORMS));
        };
        let value = match value {
            Ok(ms) => Some(ms),
            Err(e) => {
                errors.push(e);
                None
            }
        };
        set_once(errors, timeout_ms, "timeout", key.span, value);
    } else if lookahead.peek(kw::deadline) {
        let key: kw::deadline = input.parse()?;
        input.parse::<Token![=]>()?;
        let span = input.span();
        let value = if input.peek(LitStr) {
            parse_timeout_str(&input.parse()?)
        } else if input.peek(LitInt) {
            parse_timeout_int(&input.parse()?)
        } else {
            return Err(input.error(DEADLINE_FORMS));
        };
        let value = match value {
            Ok(ms) => Some((ms, span)),
            Err(e) => {
                errors.push(syn::Error::new(e.span(), DEADLINE_FORMS));
                None
            }
        };
        set_once(errors, deadline_ms, "deadline", key.span, value);
    } else if lookahead.peek(kw::every) {
        let key: kw::every = input.parse()?;
        input.parse::<Token![=]>()?;
        let value: LitStr = input.parse()?;
        let value = match every_millis(&value.value()) {
            Some(ms) => Some(ScheduleArg::Every(ms, value.span())),
            None => {
                errors.push(syn::Error::new(value.span(), EVERY_FORMS));
                None
            }
        };
        set_schedule(errors, schedule, key.span, value);
    } else if lookahead.peek(kw::catch_up) {
        let key: kw::catch_up = input.parse()?;
        input.parse::<Token![=]>()?;
        let value: syn::LitBool = input.parse()?;
        set_once(
            errors,
            catch_up,
            "catch_up",
            key.span,
            Some((value.value, value.span)),
        );
    } else if lookahead.peek(kw::time_zone) {
        let key: kw::time_zone = input.parse()?;
        input.parse::<Token![=]>()?;
        let value: LitStr = input.parse()?;
        let text = value.value();
        let value = if text.is_empty() || text.len() > 64 || text.contains(char::is_whitespace) {
            errors.push(syn::Error::new(
                value.span(),
                "`time_zone` is a name of the IANA time zone database, such as \
                 \"Europe/Paris\" or \"America/New_York\"",
            ));
            None
        } else {
            Some(value)
        };
        set_once(errors, time_zone, "time_zone", key.span, value);
    } else if lookahead.peek(kw::cron) {
        let key: kw::cron = input.parse()?;
        input.parse::<Token![=]>()?;
        let value: LitStr = input.parse()?;
        let fields = value.value().split_whitespace().count();
        let value = if fields == 6 || fields == 7 {
            Some(ScheduleArg::Cron(value))
        } else {
            errors.push(syn::Error::new(
                value.span(),
                format!(
                    "`cron` takes six fields, seconds first (`sec min hour day month weekday`, \
                     and a year if you like), not {fields}: \"0 */5 * * * *\" is every five \
                     minutes, \"0 0 6 1 * *\" 06:00 on the first of each month (UTC, or the \
                     `time_zone` given)"
                ),
            ));
            None
        };
        set_schedule(errors, schedule, key.span, value);
    } else if lookahead.peek(kw::queue) {
        let key: kw::queue = input.parse()?;
        input.parse::<Token![=]>()?;
        let value: LitStr = input.parse()?;
        let text = value.value();
        let value = if text.trim().is_empty()
            || text.trim() != text
            || text.chars().count() > MAX_QUEUE_CHARS
            || text.chars().any(char::is_control)
        {
            errors.push(syn::Error::new(
                value.span(),
                format!(
                    "`queue` must be 1 to {MAX_QUEUE_CHARS} characters, without control \
                     characters or spaces at either end; write e.g. queue = \"payments\""
                ),
            ));
            None
        } else {
            Some(value)
        };
        set_once(errors, queue, "queue", key.span, value);
    } else if lookahead.peek(kw::partition) {
        let key: kw::partition = input.parse()?;
        input.parse::<Token![=]>()?;
        let value: syn::Expr = input.parse()?;
        let value = match check_partition(value) {
            Ok(value) => Some(value),
            Err(e) => {
                errors.push(e);
                None
            }
        };
        set_once(errors, partition, "partition", key.span, value);
    } else if lookahead.peek(Token![crate]) {
        let key: Token![crate] = input.parse()?;
        input.parse::<Token![=]>()?;
        let value: LitStr = input.parse()?;
        let value = match value.parse_with(syn::Path::parse_mod_style) {
            Ok(path) => Some(path),
            Err(_) => {
                errors.push(syn::Error::new(
                    value.span(),
                    "`crate` must be a path to the async-exec crate; write e.g. \
                     crate = \"::async_exec\"",
                ));
                None
            }
        };
        set_once(errors, crate_path, "crate", key.span, value);
    } else if input.peek(Ident::peek_any) {
        let key = input.call(Ident::parse_any)?;
        errors.push(unknown_key(&key));
        skip_value(input)?;
    } else {
        return Err(lookahead.error());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
