//! Which server the harness starts: `redis-server` and `redis-cli` from `PATH`, or the
//! binaries that `RLOCK_TEST_SERVER` names, so that one suite runs on every server of the
//! matrix (Redis 6.2, 7.x, Valkey 8.x).
//!
//! `RLOCK_TEST_SERVER` is either a directory holding `redis-server`/`redis-cli` or
//! `valkey-server`/`valkey-cli`, or the name of a server that `.ci/servers` installed under
//! the workspace's `.servers/` directory (`redis-6.2`, `valkey-8.1`). Sentinels are the same
//! server binary with `--sentinel`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable that picks the server binaries.
pub const SERVER_SETTING: &str = "RLOCK_TEST_SERVER";

/// The server and command-line binaries the harness runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerBinaries {
    /// The server (`redis-server` or `valkey-server`); also run as a sentinel.
    pub server: PathBuf,
    /// Its command-line client, which creates clusters (`redis-cli` or `valkey-cli`).
    pub cli: PathBuf,
    /// What the setting said (`redis-6.2`, a directory), or `PATH` when it was not set.
    pub origin: String,
}

/// The binaries of this process's setting, resolved once.
///
/// # Panics
///
/// When `RLOCK_TEST_SERVER` names a directory or server that holds no server binary: the
/// message says what was looked for and how to install it.
pub fn binaries() -> &'static ServerBinaries {
    static CHOSEN: OnceLock<ServerBinaries> = OnceLock::new();
    CHOSEN.get_or_init(|| {
        let setting = std::env::var(SERVER_SETTING).ok().filter(|s| !s.is_empty());
        resolve(setting.as_deref(), &installed_servers()).unwrap_or_else(|why| panic!("{why}"))
    })
}

/// Where `.ci/servers` installs the matrix's servers: `<workspace>/.servers/<name>/`.
pub fn installed_servers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."))
        .join(".servers")
}

/// The binaries for `setting` (`None`: the ones on `PATH`), a server name being looked up in
/// `installed`.
pub fn resolve(setting: Option<&str>, installed: &Path) -> Result<ServerBinaries, String> {
    let Some(setting) = setting else {
        return Ok(ServerBinaries {
            server: PathBuf::from("redis-server"),
            cli: PathBuf::from("redis-cli"),
            origin: "PATH".to_owned(),
        });
    };
    let dir = if setting.contains('/') {
        PathBuf::from(setting)
    } else {
        installed.join(setting)
    };
    let pick = |names: [&str; 2]| names.iter().map(|n| dir.join(n)).find(|p| p.is_file());
    match (
        pick(["redis-server", "valkey-server"]),
        pick(["redis-cli", "valkey-cli"]),
    ) {
        (Some(server), Some(cli)) => Ok(ServerBinaries {
            server,
            cli,
            origin: setting.to_owned(),
        }),
        _ => Err(format!(
            "{SERVER_SETTING}={setting}: {} holds no redis-server/redis-cli nor \
             valkey-server/valkey-cli; install the matrix's servers with `.ci/servers install` \
             or name a directory of binaries",
            dir.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn unset_is_path_and_a_name_is_looked_up_among_the_installed() {
        let path = resolve(None, Path::new("/nowhere")).unwrap();
        assert_eq!(path.server, PathBuf::from("redis-server"));

        let installed = std::env::temp_dir().join(format!("rlock-bins-{}", std::process::id()));
        let valkey = installed.join("valkey-8.1");
        std::fs::create_dir_all(&valkey).unwrap();
        for name in ["valkey-server", "valkey-cli"] {
            std::fs::write(valkey.join(name), "").unwrap();
        }
        let found = resolve(Some("valkey-8.1"), &installed).unwrap();
        assert_eq!(found.server, valkey.join("valkey-server"));
        assert_eq!(found.cli, valkey.join("valkey-cli"));
        let by_dir = resolve(Some(valkey.to_str().unwrap()), Path::new("/nowhere")).unwrap();
        assert_eq!(by_dir.server, found.server);

        let missing = resolve(Some("redis-5.0"), &installed).unwrap_err();
        assert!(missing.contains("redis-5.0"), "{missing}");
        assert!(missing.contains(".ci/servers install"), "{missing}");
        std::fs::remove_dir_all(&installed).unwrap();
    }
}
