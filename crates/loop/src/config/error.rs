//! [`ConfigError`]: why configuration could not be loaded, each error
//! naming its file and field or line and column.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why configuration could not be loaded. Paths are shown relative to the
/// repo root where they are inside it; every message names the file and the
/// field, or the line and column.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A required file does not exist.
    #[error("{}: missing {what}", file.display())]
    Missing {
        /// The file.
        file: PathBuf,
        /// What it should hold, e.g. `workflow prompt`.
        what: &'static str,
    },
    /// A file exists but cannot be read.
    #[error("{}: cannot read: {source}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// Malformed TOML, a value of the wrong type, a missing required key or
    /// an unknown key, as the TOML parser reports it, e.g.
    /// `sandloop-loop.toml:3:13: max_turns: invalid value: integer -1,
    /// expected u32`; or a file that is not UTF-8.
    #[error("{}{}: {}{message}", file.display(), LineColumn(*position), FieldPrefix(field.as_deref()))]
    Toml {
        /// The file.
        file: PathBuf,
        /// 1-based line and column (in characters) of the error, when the
        /// parser knows it.
        position: Option<(usize, usize)>,
        /// Dotted path of the field whose value is wrong, e.g. `max_turns`,
        /// `run_after_successes.every`, `dirs[1]`; `None` for a syntax error
        /// or an error about the whole document. An unknown key is named by
        /// its own path; a missing key by the table that lacks it (the
        /// message names the key).
        field: Option<String>,
        /// The parser's message.
        message: String,
    },
    /// A field holds a value the rules refuse, or names something that does
    /// not exist.
    #[error("{}: {field}: {message}", file.display())]
    Field {
        /// The file.
        file: PathBuf,
        /// The field, e.g. `must_follow`, `dirs[1]`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The workflow set is not a valid name, does not exist or holds no
    /// workflows.
    #[error("workflow set {name:?}: {message}")]
    WorkflowSet {
        /// The set's name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// Several errors, in the order found; never nested, never fewer than
    /// two (see [`ConfigError::from_many`]).
    #[error("{} configuration errors:{}", .0.len(), Bulleted(.0))]
    Many(Vec<ConfigError>),
}

struct LineColumn(Option<(usize, usize)>);

impl fmt::Display for LineColumn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some((line, column)) => write!(f, ":{line}:{column}"),
            None => Ok(()),
        }
    }
}

/// `field: ` before a message, or nothing.
struct FieldPrefix<'a>(Option<&'a str>);

impl fmt::Display for FieldPrefix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(field) => write!(f, "{field}: "),
            None => Ok(()),
        }
    }
}

struct Bulleted<'a>(&'a [ConfigError]);

impl fmt::Display for Bulleted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for error in self.0 {
            write!(f, "\n- {error}")?;
        }
        Ok(())
    }
}

impl ConfigError {
    /// One error from several: the error itself when there is one,
    /// [`ConfigError::Many`] (flattened) otherwise.
    ///
    /// # Panics
    /// When `errors` is empty.
    pub fn from_many(errors: Vec<ConfigError>) -> ConfigError {
        let mut flat: Vec<ConfigError> = Vec::with_capacity(errors.len());
        for error in errors {
            match error {
                ConfigError::Many(inner) => flat.extend(inner),
                other => flat.push(other),
            }
        }
        assert!(!flat.is_empty(), "ConfigError::from_many needs an error");
        if flat.len() == 1 {
            flat.remove(0)
        } else {
            ConfigError::Many(flat)
        }
    }

    /// The individual errors: the list of a [`ConfigError::Many`], else
    /// this error alone.
    pub fn errors(&self) -> &[ConfigError] {
        match self {
            ConfigError::Many(errors) => errors,
            other => std::slice::from_ref(other),
        }
    }

    pub(super) fn into_errors(self) -> Vec<ConfigError> {
        match self {
            ConfigError::Many(errors) => errors,
            other => vec![other],
        }
    }
}
