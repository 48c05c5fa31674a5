//! The bearer token that guards `sandloop loop serve`: read from a file
//! (`--token-file`), created at random with mode 0600 (`sandloop loop
//! token`, `loop init --token`), checked in constant time on every request
//! and sent by `sandloop loop worker` as `Authorization: Bearer TOKEN`.
//!
//! loopy-loop's coordinator has no authentication; a worker of it sends no
//! token, so it can only drive a coordinator served without one (which
//! `loop serve` allows on loopback only).

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::SANDLOOP_DIRNAME;

/// The token file's name in a loop's `.sandloop/` (`loop token`, `loop
/// init --token`).
pub const TOKEN_FILE: &str = "token";

/// Where `loop token` and `loop init --token` put the token of the loop
/// in `repo` by default: `REPO/.sandloop/token`.
pub fn default_token_file(repo: &Path) -> PathBuf {
    repo.join(SANDLOOP_DIRNAME).join(TOKEN_FILE)
}

/// Fewest characters a token may have (a created one has 64).
pub const MIN_TOKEN_CHARS: usize = 16;
/// Most bytes read from a token file (a token is one short line).
const MAX_TOKEN_FILE_BYTES: u64 = 4096;
/// Random bytes in a created token (written as 64 hex digits).
const CREATED_TOKEN_BYTES: usize = 32;

/// A token file could not be read, is not a usable token, or could not be
/// created. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file could not be opened or read.
    #[error("cannot read the token file {}: {source}", path.display())]
    Read {
        /// The token file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no usable token.
    #[error("the token file {} {why}", path.display())]
    Invalid {
        /// The token file.
        path: PathBuf,
        /// What is wrong, e.g. "holds 5 characters; a token has at least 16".
        why: String,
    },
    /// A new token file could not be written.
    #[error("cannot create the token file {}: {source}", path.display())]
    Create {
        /// The token file.
        path: PathBuf,
        /// The I/O error (`AlreadyExists` when the file is there already).
        #[source]
        source: std::io::Error,
    },
}

/// A bearer token. Its `Debug` never shows the secret.
#[derive(Clone)]
pub struct Token {
    secret: String,
    digest: [u8; 32],
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

impl Token {
    /// The token held by `path`: its text with surrounding white space
    /// removed; at least [`MIN_TOKEN_CHARS`] visible ASCII characters, no
    /// spaces or controls, and at most 4 KiB of file.
    pub fn from_file(path: &Path) -> Result<Self, TokenError> {
        use std::io::Read;
        let read = |source| TokenError::Read {
            path: path.to_path_buf(),
            source,
        };
        let invalid = |why: String| TokenError::Invalid {
            path: path.to_path_buf(),
            why,
        };
        // Never through a link, never waiting on a FIFO.
        let file =
            sandloop_core::atomic::open_regular(std::fs::OpenOptions::new().read(true), path)
                .map_err(|error| match error {
                    sandloop_core::atomic::OutputFileError::Io { source, .. } => read(source),
                    refused => invalid(format!("cannot be used: {refused}")),
                })?;
        let mut bytes = Vec::new();
        file.take(MAX_TOKEN_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read)?;
        if bytes.len() as u64 > MAX_TOKEN_FILE_BYTES {
            return Err(invalid("is larger than 4 KiB; a token is one line".into()));
        }
        let text = String::from_utf8(bytes)
            .map_err(|_| invalid("is not text; a token is visible ASCII".into()))?;
        Self::new(text.trim()).map_err(invalid)
    }

    /// A token from its text (at least [`MIN_TOKEN_CHARS`] visible ASCII
    /// characters); the error says what is wrong.
    pub fn new(text: &str) -> Result<Self, String> {
        if let Some(bad) = text.chars().find(|c| !c.is_ascii_graphic()) {
            return Err(format!(
                "holds {bad:?}; a token is visible ASCII, without spaces"
            ));
        }
        let count = text.chars().count();
        if count < MIN_TOKEN_CHARS {
            return Err(format!(
                "holds {count} characters; a token has at least {MIN_TOKEN_CHARS} \
                 (create one with `sandloop loop token`)"
            ));
        }
        Ok(Self {
            secret: text.to_string(),
            digest: Sha256::digest(text.as_bytes()).into(),
        })
    }

    /// The `Authorization` header value a worker sends: `Bearer TOKEN`.
    pub fn header_value(&self) -> String {
        format!("Bearer {}", self.secret)
    }

    /// Whether an `Authorization` header value carries this token. The
    /// comparison takes the same time whatever the value (the SHA-256
    /// digests of both are compared with `subtle`), so the answer's timing
    /// tells nothing about the token.
    pub fn accepts(&self, authorization: Option<&[u8]>) -> bool {
        let offered = authorization
            .and_then(|value| value.strip_prefix(b"Bearer "))
            .unwrap_or(b"");
        let offered: [u8; 32] = Sha256::digest(offered).into();
        bool::from(offered.ct_eq(&self.digest))
    }
}

/// Write a new random token (64 hex digits from the OS's random source) to
/// `path`, created with mode 0600 and never over an existing file (nor
/// through a link at `path`). Returns the token.
pub fn create_token_file(path: &Path) -> Result<Token, TokenError> {
    let create = |source| TokenError::Create {
        path: path.to_path_buf(),
        source,
    };
    let mut bytes = [0u8; CREATED_TOKEN_BYTES];
    getrandom::getrandom(&mut bytes)
        .map_err(|error| create(std::io::Error::other(error.to_string())))?;
    let text = hex::encode(bytes);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(create)?;
    file.write_all(format!("{text}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(create)?;
    Ok(Token::new(&text).expect("64 hex digits are a token"))
}

/// A warning when the token file at `path` can be read by its group or by
/// others (mode bits 0o077), `None` otherwise.
pub fn loose_permissions_warning(path: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode();
        (mode & 0o077 != 0).then(|| {
            format!(
                "the token file {} can be read by other users (mode {:o}); `chmod 600` it",
                path.display(),
                mode & 0o777
            )
        })
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_is_accepted() {
        let token = Token::new("0123456789abcdef-token").unwrap();
        assert!(token.accepts(Some(b"Bearer 0123456789abcdef-token")));
        for wrong in [
            &b"Bearer 0123456789abcdef-toke"[..],
            b"Bearer 0123456789abcdef-token ",
            b"bearer 0123456789abcdef-token",
            b"0123456789abcdef-token",
            b"Basic 0123456789abcdef-token",
            b"Bearer ",
            b"",
        ] {
            assert!(
                !token.accepts(Some(wrong)),
                "{:?}",
                String::from_utf8_lossy(wrong)
            );
        }
        assert!(!token.accepts(None));
        assert_eq!(format!("{token:?}"), "Token(…)");
    }

    #[test]
    fn short_spaced_or_binary_token_files_are_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        for (content, expected) in [
            (
                &b"short\n"[..],
                "holds 5 characters; a token has at least 16",
            ),
            (b"has a space in the middle", "holds ' '"),
            (b"\xff\xfe not text", "is not text"),
        ] {
            let path = dir.path().join("token");
            std::fs::write(&path, content).unwrap();
            let error = Token::from_file(&path).unwrap_err().to_string();
            assert!(error.contains(&path.display().to_string()), "{error}");
            assert!(error.contains(expected), "{error}");
        }
        let error = Token::from_file(&dir.path().join("missing")).unwrap_err();
        assert!(matches!(error, TokenError::Read { .. }), "{error}");
        let error = Token::from_file(dir.path()).unwrap_err().to_string();
        assert!(error.contains("not a regular file"), "{error}");
        #[cfg(unix)]
        {
            // A FIFO is refused at once, not waited on.
            let fifo = dir.path().join("fifo");
            let made = std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap();
            assert!(made.success());
            let error = Token::from_file(&fifo).unwrap_err().to_string();
            assert!(error.contains("not a regular file"), "{error}");
            let link = dir.path().join("link");
            std::os::unix::fs::symlink(dir.path().join("token"), &link).unwrap();
            let error = Token::from_file(&link).unwrap_err().to_string();
            assert!(error.contains("symbolic link"), "{error}");
        }
    }

    #[test]
    fn a_created_token_is_private_random_and_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        let token = create_token_file(&path).unwrap();
        let again = Token::from_file(&path).unwrap();
        assert!(again.accepts(Some(token.header_value().as_bytes())));
        assert_eq!(token.secret.len(), 64);
        assert!(loose_permissions_warning(&path).is_none());
        let other = create_token_file(&dir.path().join("other")).unwrap();
        assert_ne!(token.secret, other.secret);
        let error = create_token_file(&path).unwrap_err();
        assert!(
            matches!(&error, TokenError::Create { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists),
            "{error}"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            let warning = loose_permissions_warning(&path).unwrap();
            assert!(warning.contains("mode 644"), "{warning}");
        }
    }
}
