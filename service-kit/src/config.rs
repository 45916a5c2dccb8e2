//! Layered configuration, the same in every service: the defaults, then a
//! TOML file, then `PREFIX_*` environment variables (nested keys joined
//! with `__`, e.g. `RDV_GATEWAY_LIMITS__PER_SENDER__MAX=5`). Unknown keys
//! are refused by the services' `deny_unknown_fields` structs, so a typo
//! is an error at start, not a silently ignored setting.
//!
//! Secrets stay out of the environment: `PREFIX_<KEY>__FILE=/path` sets
//! `<KEY>` to the file's contents (one trailing newline dropped), the way
//! Docker/Compose secrets under `/run/secrets` are meant to be read, e.g.
//! `RDV_DIRECTORY_DATABASE__FILE=/run/secrets/directory-database-url`.
//! The key behind it is checked like any other, and never logged.

use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why a configuration was refused: the file, the key and what is wrong
/// with it, in figment's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Loads `T` from `defaults`, the file (which must exist when named) and
/// the environment. `<env_prefix>CONFIG` names the file itself (the
/// binaries' `--config` fallback, which the Docker images set), so it is
/// never read as a key.
pub fn load<T: Serialize + DeserializeOwned>(
    defaults: &T,
    file: Option<&Path>,
    env_prefix: &str,
) -> Result<T, ConfigError> {
    let mut f = Figment::from(Serialized::defaults(defaults));
    if let Some(p) = file {
        if !p.exists() {
            return Err(ConfigError(format!("{} does not exist", p.display())));
        }
        f = f.merge(Toml::file(p));
    }
    let env = || Env::prefixed(env_prefix).ignore(&["CONFIG"]);
    f = f.merge(env().filter(|k| !is_file_key(k.as_str())).split("__"));
    for (key, value) in env().filter(|k| is_file_key(k.as_str())).iter() {
        let key = key.as_str().to_ascii_lowercase();
        let name = &key[..key.len() - FILE_SUFFIX.len()];
        let path = key_path(name);
        if env().split("__").iter().any(|(k, _)| k.as_str() == path) {
            return Err(ConfigError(format!(
                "{env_prefix}{} and {env_prefix}{}{FILE_SUFFIX} are both set; use one",
                name.to_ascii_uppercase(),
                name.to_ascii_uppercase(),
            )));
        }
        // Always a string (a digits-only password stays one): secrets are
        // URLs, passwords and tokens, never numbers.
        let secret = read_secret_file(Path::new(&value))?;
        f = f.merge(Serialized::default(&path, secret));
    }
    f.extract().map_err(|e| ConfigError(e.to_string()))
}

/// The suffix of an environment variable naming a file that holds the
/// key's value (Compose secrets).
pub const FILE_SUFFIX: &str = "__file";

/// Most bytes read from a `__FILE` secret: a URL or password, not a blob.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

fn is_file_key(k: &str) -> bool {
    k.to_ascii_lowercase().ends_with(FILE_SUFFIX) && k.len() > FILE_SUFFIX.len()
}

/// `cache__database_url` -> `cache.database_url` (figment's key path).
fn key_path(env_key: &str) -> String {
    env_key.split("__").collect::<Vec<_>>().join(".")
}

/// The value in a secret file: UTF-8, bounded, one trailing newline (LF or
/// CRLF) dropped, not empty. Errors name the path, never the contents.
fn read_secret_file(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    let err = |why: String| ConfigError(format!("secret file {}: {why}", path.display()));
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut buf = Vec::new();
    file.take(MAX_SECRET_FILE_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| err(e.to_string()))?;
    if buf.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(err(format!("larger than {MAX_SECRET_FILE_BYTES} bytes")));
    }
    let mut text = String::from_utf8(buf).map_err(|_| err("not UTF-8".into()))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    if text.is_empty() {
        return Err(err("empty".into()));
    }
    Ok(text)
}

/// Parses TOML text over `defaults` alone (sample configs, tests).
pub fn from_toml<T: Serialize + DeserializeOwned>(
    defaults: &T,
    text: &str,
) -> Result<T, ConfigError> {
    Figment::from(Serialized::defaults(defaults))
        .merge(Toml::string(text))
        .extract()
        .map_err(|e| ConfigError(e.to_string()))
}

#[cfg(test)]
// figment::Jail fixes the closure's error type; it is large by design.
#[allow(clippy::result_large_err)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Sample {
        name: String,
        port: u16,
        limits: Limits,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Limits {
        max: u32,
        label: String,
    }

    impl Default for Sample {
        fn default() -> Self {
            Self {
                name: "x".into(),
                port: 1,
                limits: Limits::default(),
            }
        }
    }

    impl Default for Limits {
        fn default() -> Self {
            Self {
                max: 10,
                label: String::new(),
            }
        }
    }

    #[test]
    fn file_then_env_over_defaults_and_config_is_not_a_key() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("c.toml", "name = \"from-file\"\nport = 2\n")?;
            jail.set_env("RDVKIT_TEST_PORT", "3");
            jail.set_env("RDVKIT_TEST_LIMITS__MAX", "7");
            // Names the file; a key lookup would refuse it as unknown.
            jail.set_env("RDVKIT_TEST_CONFIG", "c.toml");
            let s: Sample = load(
                &Sample::default(),
                Some(Path::new("c.toml")),
                "RDVKIT_TEST_",
            )
            .map_err(|e| e.to_string())?;
            assert_eq!(s.name, "from-file");
            assert_eq!(s.port, 3);
            assert_eq!(s.limits.max, 7);
            Ok(())
        });
    }

    #[test]
    fn file_suffix_reads_the_value_from_a_file_nested_too() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("name-secret", "s3cret-name\n")?;
            jail.create_file("label-secret", "s3cret-label\r\n")?;
            let dir = jail.directory().to_path_buf();
            jail.set_env("RDVKIT_F1_NAME__FILE", dir.join("name-secret").display());
            jail.set_env(
                "RDVKIT_F1_LIMITS__LABEL__FILE",
                dir.join("label-secret").display(),
            );
            let s: Sample =
                load(&Sample::default(), None, "RDVKIT_F1_").map_err(|e| e.to_string())?;
            assert_eq!(s.name, "s3cret-name", "one trailing newline dropped");
            assert_eq!(s.limits.label, "s3cret-label", "nested key, CRLF dropped");
            jail.create_file("digits", "12345")?;
            jail.set_env("RDVKIT_F1_NAME__FILE", dir.join("digits").display());
            let s: Sample =
                load(&Sample::default(), None, "RDVKIT_F1_").map_err(|e| e.to_string())?;
            assert_eq!(s.name, "12345", "a digits-only secret is still a string");
            Ok(())
        });
    }

    #[test]
    fn file_suffix_refusals_name_the_path_never_the_contents() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("secret", "hunter2-value")?;
            jail.create_file("empty", "\n")?;
            let dir = jail.directory().to_path_buf();
            let secret = dir.join("secret").display().to_string();
            // An unknown key behind a file is refused like any other.
            jail.set_env("RDVKIT_F2_PROT__FILE", &secret);
            let e = load(&Sample::default(), None, "RDVKIT_F2_")
                .unwrap_err()
                .to_string();
            assert!(e.contains("prot"), "{e}");
            assert!(!e.contains("hunter2"), "contents leaked: {e}");
            // The value and its file both set: ambiguous, refused.
            jail.set_env("RDVKIT_F3_NAME", "plain");
            jail.set_env("RDVKIT_F3_NAME__FILE", &secret);
            let e = load(&Sample::default(), None, "RDVKIT_F3_")
                .unwrap_err()
                .to_string();
            assert!(e.contains("both set"), "{e}");
            assert!(!e.contains("hunter2"), "contents leaked: {e}");
            // Missing and empty files.
            jail.set_env("RDVKIT_F4_NAME__FILE", dir.join("absent").display());
            let e = load(&Sample::default(), None, "RDVKIT_F4_")
                .unwrap_err()
                .to_string();
            assert!(e.contains("absent"), "{e}");
            jail.set_env("RDVKIT_F5_NAME__FILE", dir.join("empty").display());
            let e = load(&Sample::default(), None, "RDVKIT_F5_")
                .unwrap_err()
                .to_string();
            assert!(e.contains("empty"), "{e}");
            // A secret is a string: a number key behind a file is a type
            // error naming the key, not a panic.
            jail.set_env("RDVKIT_F6_PORT__FILE", &secret);
            let e = load(&Sample::default(), None, "RDVKIT_F6_")
                .unwrap_err()
                .to_string();
            assert!(e.contains("port"), "{e}");
            Ok(())
        });
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; MAX_SECRET_FILE_BYTES as usize + 1]).unwrap();
        let e = read_secret_file(&big).unwrap_err().to_string();
        assert!(e.contains("larger than"), "{e}");
    }

    #[test]
    fn unknown_keys_and_missing_files_are_refused() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("RDVKIT_TEST2_PROT", "3");
            let e = load(&Sample::default(), None, "RDVKIT_TEST2_").unwrap_err();
            assert!(e.to_string().contains("prot"), "{e}");
            let e = load(&Sample::default(), Some(Path::new("nope.toml")), "X_").unwrap_err();
            assert!(e.to_string().contains("nope.toml does not exist"), "{e}");
            Ok(())
        });
        let e = from_toml(&Sample::default(), "[limits]\nmax = 1\nmin = 2\n").unwrap_err();
        assert!(e.to_string().contains("min"), "{e}");
        let s: Sample = from_toml(&Sample::default(), "[limits]\nmax = 4\n").unwrap();
        assert_eq!((s.name.as_str(), s.limits.max), ("x", 4));
    }
}
