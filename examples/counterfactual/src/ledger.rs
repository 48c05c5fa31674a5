//! The ledger model: a small CSV of dated amounts with a `TOTAL` line,
//! parsed once per seed (the shared prefix), and an import that checks it
//! target by target under the importer's settings.

use sandloop_guest::{Error, Object, ValidationOutcome, Value, json};
use sha2::{Digest, Sha256};

/// One data row of a ledger, as written (amounts are still text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub date: String,
    pub account: String,
    pub amount: String,
}

/// A parsed ledger: the prefix every import of it shares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ledger {
    pub header: Vec<String>,
    pub rows: Vec<Row>,
    /// The `TOTAL` line's amount, as written.
    pub declared_total: Option<String>,
    /// The source text, kept so a prefix can be rebuilt.
    pub source: String,
}

/// Split one CSV line into fields; `"..."` quotes a field with commas.
fn fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    out.push(field);
    out
}

impl Ledger {
    /// Parse `source`: a header line, data rows, and an optional final
    /// `TOTAL,,AMOUNT` line.
    pub fn parse(source: &str) -> Result<Ledger, Error> {
        let mut lines = source.lines().filter(|line| !line.trim().is_empty());
        let header = fields(
            lines
                .next()
                .ok_or_else(|| Error::invalid_item("empty ledger"))?,
        );
        let mut rows = Vec::new();
        let mut declared_total = None;
        for (index, line) in lines.enumerate() {
            let cells = fields(line);
            if cells.len() != 3 {
                return Err(Error::invalid_item(format!(
                    "line {}: expected 3 fields, found {}",
                    index + 2,
                    cells.len()
                )));
            }
            if cells[0] == "TOTAL" {
                declared_total = Some(cells[2].clone());
                continue;
            }
            rows.push(Row {
                date: cells[0].clone(),
                account: cells[1].clone(),
                amount: cells[2].clone(),
            });
        }
        Ok(Ledger {
            header,
            rows,
            declared_total,
            source: source.to_string(),
        })
    }

    /// sha256 of the parsed form (not the source): the projection digest
    /// a restore is checked against.
    pub fn digest(&self) -> String {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|row| json!([row.date, row.account, row.amount]))
            .collect();
        let projection = json!({"header": self.header, "rows": rows, "total": self.declared_total});
        hex::encode(Sha256::digest(projection.to_string().as_bytes()))
    }

    /// The ledger as bytes another instance can rebuild it from.
    pub fn to_state(&self) -> Vec<u8> {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|row| json!([row.date, row.account, row.amount]))
            .collect();
        json!({"header": self.header, "rows": rows, "total": self.declared_total, "source": self.source})
            .to_string()
            .into_bytes()
    }

    /// The ledger [`Ledger::to_state`] wrote.
    pub fn from_state(state: &[u8]) -> Result<Ledger, Error> {
        let value: Value = serde_json::from_slice(state)
            .map_err(|error| Error::new("invalid-state", error.to_string()))?;
        let text = |v: &Value| v.as_str().map(str::to_string);
        let broken = || Error::new("invalid-state", "not a ledger-import state");
        let header = value["header"]
            .as_array()
            .ok_or_else(broken)?
            .iter()
            .map(|v| text(v).ok_or_else(broken))
            .collect::<Result<Vec<_>, _>>()?;
        let rows = value["rows"]
            .as_array()
            .ok_or_else(broken)?
            .iter()
            .map(|row| {
                let cell = |i: usize| text(&row[i]).ok_or_else(broken);
                Ok::<Row, Error>(Row {
                    date: cell(0)?,
                    account: cell(1)?,
                    amount: cell(2)?,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Ledger {
            header,
            rows,
            declared_total: text(&value["total"]),
            source: text(&value["source"]).ok_or_else(broken)?,
        })
    }
}

/// How the importer reads a ledger; a candidate's change set sets these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// `amount_format: "thousands-separator"`: `1,250.00` reads as 1250.
    pub thousands_separator: bool,
    /// `on_bad_amount: "drop-row"`: a row whose amount does not read is
    /// dropped instead of failing the import.
    pub drop_bad_rows: bool,
}

impl Settings {
    /// The settings a change set asks for (unknown keys or values are an
    /// `invalid-change-set` error).
    pub fn from_change(change: &Object) -> Result<Settings, Error> {
        let mut settings = Settings::default();
        for (key, value) in change {
            match (key.as_str(), value.as_str()) {
                ("amount_format", Some("plain")) => settings.thousands_separator = false,
                ("amount_format", Some("thousands-separator")) => {
                    settings.thousands_separator = true
                }
                ("on_bad_amount", Some("fail")) => settings.drop_bad_rows = false,
                ("on_bad_amount", Some("drop-row")) => settings.drop_bad_rows = true,
                _ => {
                    return Err(Error::new(
                        "invalid-change-set",
                        format!(
                            "unknown change {key}={value}; known: amount_format plain|thousands-separator, on_bad_amount fail|drop-row"
                        ),
                    ));
                }
            }
        }
        Ok(settings)
    }
}

/// An amount in cents, or `None` when it does not read.
fn cents(amount: &str, settings: Settings) -> Option<i64> {
    let text: String = if settings.thousands_separator {
        amount.chars().filter(|c| *c != ',').collect()
    } else {
        amount.to_string()
    };
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, "00"));
    if whole.is_empty()
        || fraction.len() != 2
        || !whole.chars().all(|c| c.is_ascii_digit())
        || !fraction.chars().all(|c| c.is_ascii_digit())
    {
        return None;
    }
    Some(whole.parse::<i64>().ok()? * 100 + fraction.parse::<i64>().ok()?)
}

fn is_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 10
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes
            .iter()
            .enumerate()
            .all(|(i, b)| i == 4 || i == 7 || b.is_ascii_digit())
}

/// What an import found: every validation target's outcome, in the order
/// checked, and the imported rows' total.
#[derive(Debug)]
pub struct Import {
    pub outcomes: Vec<ValidationOutcome>,
    pub imported_rows: usize,
    pub total_cents: i64,
}

impl Import {
    /// The first target that failed, if any.
    pub fn first_failure(&self) -> Option<&ValidationOutcome> {
        self.outcomes.iter().find(|outcome| !outcome.passed)
    }
}

fn outcome(id: &str, passed: bool, summary: String) -> ValidationOutcome {
    ValidationOutcome {
        validation_id: id.into(),
        passed,
        public_summary: Some(summary),
    }
}

/// Import `ledger` under `settings`, checking in order: `header-valid`,
/// `dates-valid`, `rows-kept` (no row dropped), `amounts-parse`,
/// `totals-balance` (the imported amounts sum to the `TOTAL` line).
pub fn import(ledger: &Ledger, settings: Settings) -> Import {
    let mut outcomes = Vec::new();
    let header_ok = ledger.header == ["date", "account", "amount"];
    outcomes.push(outcome(
        "header-valid",
        header_ok,
        format!("header is {}", ledger.header.join(",")),
    ));
    let bad_dates = ledger.rows.iter().filter(|row| !is_date(&row.date)).count();
    outcomes.push(outcome(
        "dates-valid",
        bad_dates == 0,
        format!("{bad_dates} of {} dates do not read", ledger.rows.len()),
    ));
    let read: Vec<Option<i64>> = ledger
        .rows
        .iter()
        .map(|row| cents(&row.amount, settings))
        .collect();
    let unreadable: Vec<&str> = ledger
        .rows
        .iter()
        .zip(&read)
        .filter(|(_, cents)| cents.is_none())
        .map(|(row, _)| row.amount.as_str())
        .collect();
    let kept = if settings.drop_bad_rows {
        ledger.rows.len() - unreadable.len()
    } else {
        ledger.rows.len()
    };
    outcomes.push(outcome(
        "rows-kept",
        kept == ledger.rows.len(),
        format!("{kept} of {} rows imported", ledger.rows.len()),
    ));
    let parse_ok = unreadable.is_empty() || settings.drop_bad_rows;
    outcomes.push(outcome(
        "amounts-parse",
        parse_ok,
        if unreadable.is_empty() {
            "every amount reads".to_string()
        } else {
            format!(
                "amounts that do not read: {}{}",
                unreadable.join("; "),
                if settings.drop_bad_rows {
                    " (dropped)"
                } else {
                    ""
                }
            )
        },
    ));
    let total_cents: i64 = read.iter().flatten().sum();
    let declared = ledger
        .declared_total
        .as_deref()
        .and_then(|total| cents(total, settings));
    if parse_ok {
        outcomes.push(outcome(
            "totals-balance",
            declared == Some(total_cents),
            format!(
                "imported total {}.{:02}, declared {}",
                total_cents / 100,
                total_cents % 100,
                ledger.declared_total.as_deref().unwrap_or("none")
            ),
        ));
    }
    Import {
        outcomes,
        imported_rows: kept,
        total_cents,
    }
}
