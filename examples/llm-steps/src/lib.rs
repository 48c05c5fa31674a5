//! An example loop workflow plugin (world `workflow`) whose steps ask a
//! language model: every step sends its rendered prompt to an
//! OpenAI-compatible `POST {OPENAI_BASE_URL}/chat/completions` endpoint
//! through `wasi:http`, and the host lets it reach only the hosts the
//! workflow's `http_hosts` grant names.
//!
//! - A step that does not emit a goal check returns the model's reply as
//!   its text.
//! - A goal-check step (`emits-goal-check`) asks for a JSON verdict
//!   `{"goal_met": bool, "reason": "..."}` and reports it through
//!   `signals.report-goal-check` (and, when the goal is met, stops the loop
//!   with `signals.request-stop`); a reply without a verdict fails the step.
//! - Every step runs in a fresh sandbox, so memory lives in a file: when the
//!   workflow grants a directory at `/notes`, each step reads the end of
//!   `/notes/log.md` (the last 8 KiB) into its request, and each non-check
//!   step appends its reply there.
//!
//! Configuration comes from the environment the workflow grants (`env`):
//! `OPENAI_BASE_URL` (default `https://api.openai.com/v1`), `OPENAI_MODEL`
//! (default `gpt-4o-mini`) and `OPENAI_API_KEY` (sent as a bearer token when
//! set). Any server speaking the chat-completions protocol works: a local
//! one (llama.cpp, Ollama, vLLM) at `http://127.0.0.1:PORT/v1` needs
//! `http_hosts = ["127.0.0.1:PORT"]`.

wit_bindgen::generate!({
    path: "../../wit",
    world: "workflow",
});

mod http;

use exports::sandloop::adapter::step::{Guest, Outcome, Task};
use sandloop::adapter::log::{Level, log};
use sandloop::adapter::signals;
use serde_json::{Value, json};

const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
const DEFAULT_MODEL: &str = "gpt-4o-mini";
/// Longest part of a failed response body quoted in an error, characters.
const QUOTED_CHARS: usize = 300;
/// The notes file steps share, when `/notes` is granted.
const NOTES: &str = "/notes/log.md";
/// How much of the notes' end a request carries, bytes.
const NOTES_TAIL_BYTES: usize = 8 << 10;

struct Steps;

fn env(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.trim().is_empty())
}

fn quoted(text: &str) -> String {
    let mut quoted: String = text.chars().take(QUOTED_CHARS).collect();
    if quoted.len() < text.len() {
        quoted.push('…');
    }
    quoted
}

/// Ask the model; its reply text.
fn chat(system: &str, user: &str) -> Result<String, String> {
    let base = env("OPENAI_BASE_URL").unwrap_or_else(|| DEFAULT_BASE_URL.into());
    let url = format!("{}/chat/completions", base.trim_end_matches('/'));
    let model = env("OPENAI_MODEL").unwrap_or_else(|| DEFAULT_MODEL.into());
    let body = json!({
        "model": model,
        "temperature": 0,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ],
    });
    let mut headers = vec![
        ("content-type", "application/json".to_string()),
        ("accept", "application/json".to_string()),
    ];
    if let Some(key) = env("OPENAI_API_KEY") {
        headers.push(("authorization", format!("Bearer {key}")));
    }
    let (status, bytes) = http::post(&url, &headers, body.to_string().as_bytes())?;
    let text = String::from_utf8_lossy(&bytes);
    if !(200..300).contains(&status) {
        return Err(format!("{url} answered {status}: {}", quoted(&text)));
    }
    let reply: Value = serde_json::from_slice(&bytes).map_err(|error| {
        format!(
            "{url} answered with something that is not JSON ({error}): {}",
            quoted(&text)
        )
    })?;
    reply
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| {
            format!(
                "{url} answered without choices[0].message.content: {}",
                quoted(&text)
            )
        })
}

/// The system message: the step's role (the goal and criteria are in the
/// rendered prompt already).
fn system_prompt(task: &Task) -> String {
    let mut prompt = format!(
        "You are one step (workflow `{}`, iteration {}) of an automated loop. \
         Carry out the assignment you are given; be brief.\n",
        task.workflow_id, task.iteration
    );
    if task.emits_goal_check {
        prompt.push_str(
            "Decide whether the goal is met. Answer with one JSON object and nothing else: \
             {\"goal_met\": true or false, \"reason\": \"one sentence\"}.\n",
        );
    }
    prompt
}

/// The verdict in a goal-check reply: the first `{` to the last `}` must be
/// a JSON object with a boolean `goal_met` (a `reason` string is optional).
fn verdict(reply: &str) -> Result<(bool, String), String> {
    let object = match (reply.find('{'), reply.rfind('}')) {
        (Some(start), Some(end)) if start < end => &reply[start..=end],
        _ => {
            return Err(format!(
                "the goal-check reply holds no JSON object: {}",
                quoted(reply)
            ));
        }
    };
    let value: Value = serde_json::from_str(object).map_err(|error| {
        format!(
            "the goal-check reply is not JSON ({error}): {}",
            quoted(reply)
        )
    })?;
    let goal_met = value
        .get("goal_met")
        .and_then(Value::as_bool)
        .ok_or_else(|| {
            format!(
                "the goal-check reply has no boolean goal_met: {}",
                quoted(reply)
            )
        })?;
    let reason = value
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    Ok((goal_met, reason))
}

/// The end of the notes file, if `/notes` is granted and it exists.
fn notes_tail() -> Option<String> {
    let text = std::fs::read_to_string(NOTES).ok()?;
    let mut start = text.len().saturating_sub(NOTES_TAIL_BYTES);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    Some(text[start..].to_string())
}

fn append_note(task: &Task, reply: &str) -> Result<(), String> {
    if !std::path::Path::new("/notes").is_dir() {
        return Ok(());
    }
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(NOTES)
        .and_then(|mut file| {
            writeln!(
                file,
                "## iteration {} ({})\n\n{}\n",
                task.iteration,
                task.workflow_id,
                reply.trim()
            )
        })
        .map_err(|error| format!("cannot append to {NOTES}: {error}"))
}

fn step(task: &Task) -> Result<String, String> {
    let user = match notes_tail() {
        Some(notes) if !notes.trim().is_empty() => {
            format!("{}\n\nNotes from earlier steps:\n{notes}", task.prompt)
        }
        _ => task.prompt.clone(),
    };
    let reply = chat(&system_prompt(task), &user)?;
    if !task.emits_goal_check {
        append_note(task, &reply)?;
        return Ok(reply);
    }
    let (goal_met, reason) = verdict(&reply)?;
    signals::report_goal_check(goal_met, &reason)?;
    if goal_met {
        // The verdict is the record; stopping is the control signal's job.
        signals::request_stop(signals::StopReason::GoalMet, &reason)?;
    }
    Ok(format!("goal_met: {goal_met}; {reason}"))
}

impl Guest for Steps {
    fn run_step(task: Task) -> Outcome {
        log(
            Level::Info,
            &format!("{} step, iteration {}", task.workflow_id, task.iteration),
        );
        match step(&task) {
            Ok(text) => Outcome {
                success: true,
                text: Some(text),
                error: None,
            },
            Err(error) => Outcome {
                success: false,
                text: None,
                error: Some(error),
            },
        }
    }
}

export!(Steps);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_is_found_inside_prose() {
        let (met, reason) =
            verdict("Sure! {\"goal_met\": true, \"reason\": \"three lines\"} Done.").unwrap();
        assert!(met);
        assert_eq!(reason, "three lines");
        assert!(!verdict("{\"goal_met\": false}").unwrap().0);
    }

    #[test]
    fn a_reply_without_a_boolean_verdict_is_refused() {
        assert!(verdict("yes").unwrap_err().contains("no JSON object"));
        assert!(
            verdict("{\"goal_met\": \"yes\"}")
                .unwrap_err()
                .contains("goal_met")
        );
        assert!(verdict("{goal_met}").unwrap_err().contains("not JSON"));
    }

    #[test]
    fn urls_are_split_into_scheme_authority_and_path() {
        let url = http::parse_url("http://127.0.0.1:8080/v1/chat/completions").unwrap();
        assert!(!url.https);
        assert_eq!(url.authority, "127.0.0.1:8080");
        assert_eq!(url.path, "/v1/chat/completions");
        assert!(http::parse_url("https://api.openai.com").unwrap().https);
        assert!(http::parse_url("ftp://x").is_err());
        assert!(http::parse_url("http:///v1").is_err());
    }
}
