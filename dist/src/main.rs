//! `goset-dist install --prefix DIR`: installs a built goset (`make install` runs it, see
//! docs/install.md): the programs into `bin/`, `libgoset.so` into `lib/` (where goset-run looks
//! for it: beside itself, then `../lib/`), and man pages and shell completions generated from
//! the programs' own clap commands, and a systemd service and timer that keep the node's noise
//! record fresh (not enabled). `goset-dist uninstall` removes what install puts there.
//! `goset-dist deb` builds a Debian package of the same files (`make deb`; deb.rs).
//!
//! A crate of its own: it needs goset-bench's command, and goset-bench depends on the launcher.

use clap::{CommandFactory, Parser, ValueEnum};
use goset::completions::{self, Shell};
use goset::error::Error;
use goset_dist::cli::{Action, Cli, Place};
use std::path::{Path, PathBuf};

mod deb;

/// The programs, each with its clap command (for its man page and completions).
fn programs() -> [clap::Command; 3] {
    [
        goset::cli::GosetCli::command(),
        goset::cli::RunCli::command(),
        goset_bench::cli::BenchCli::command(),
    ]
}

/// Where a program's completions for `shell` go under the prefix: the directories that
/// bash-completion, zsh (its default fpath under /usr/local and /usr) and fish load from.
fn completion_path(shell: Shell, program: &str) -> PathBuf {
    match shell {
        Shell::Bash => format!("share/bash-completion/completions/{program}"),
        Shell::Zsh => format!("share/zsh/site-functions/_{program}"),
        Shell::Fish => format!("share/fish/vendor_completions.d/{program}.fish"),
    }
    .into()
}

/// What a file holds.
enum Content {
    /// A file of the built tree, by name.
    Built(String),
    /// A file of the built tree built only where its inputs are (the Slurm plugin, where
    /// spank.h is): installed when built, with the files that go with it.
    Optional(String, Vec<Item>),
    /// Text generated here.
    Text(Vec<u8>),
}

/// A file install writes.
struct Item {
    /// Its path under the prefix (under the system configuration directory with `etc`).
    path: PathBuf,
    /// Its permission bits.
    mode: u32,
    content: Content,
    /// A configuration file: under `/etc` for PREFIX `/usr`, else under `PREFIX/etc`.
    etc: bool,
}

/// The Slurm plugin (`make` builds it where libslurm-dev's spank.h is, docs/slurm.md).
const SPANK_PLUGIN: &str = "goset_spank.so";

/// The plugin and its plugstack.conf.d snippet, which lists it `optional` with the installed
/// goset-run: Debian's /etc/slurm/plugstack.conf includes `plugstack.conf.d/*.conf`.
fn slurm_items(prefix: &Path) -> Item {
    let snippet = format!(
        "# goset's SPANK plugin: --goset for srun, sbatch and salloc (docs/slurm.md).\n\
         # Arguments: default=on makes goset the default of every step (--goset=off opts out);\n\
         # allow_root_flags lets jobs give --cgroup, --steer and --fence; goset_run=PATH is the\n\
         # goset-run the nodes start. The plugin is locked to the Slurm release it was built for.\n\
         optional {}/lib/goset/{SPANK_PLUGIN} goset_run={}/bin/goset-run\n",
        prefix.display(),
        prefix.display()
    );
    Item {
        path: Path::new("lib/goset").join(SPANK_PLUGIN),
        mode: 0o644,
        content: Content::Optional(
            SPANK_PLUGIN.into(),
            vec![Item {
                path: "slurm/plugstack.conf.d/goset.conf".into(),
                mode: 0o644,
                content: Content::Text(snippet.into_bytes()),
                etc: true,
            }],
        ),
        etc: false,
    }
}

/// The systemd service that samples every CPU into the node's noise record, and its timer
/// (installed, never enabled: `systemctl enable --now goset-noise.timer` turns it on).
const NOISE_SERVICE: &str = "[Unit]
Description=goset: sample every CPU's noise into the node's noise record
Documentation=man:goset(1)

[Service]
Type=oneshot
ExecStart=@PREFIX@/bin/goset noise --watch 60s --quiet
Nice=10
";

/// See [`NOISE_SERVICE`].
const NOISE_TIMER: &str = "[Unit]
Description=goset: keep the node's noise record fresh (off by default)
Documentation=man:goset(1)

[Timer]
OnBootSec=5min
OnUnitActiveSec=10min
RandomizedDelaySec=60

[Install]
WantedBy=timers.target
";

/// Every file install writes, the generated ones rendered.
fn items(prefix: &Path) -> Result<Vec<Item>, Error> {
    let mut items = Vec::new();
    for cmd in programs() {
        let name = cmd.get_name().to_string();
        items.push(Item {
            path: Path::new("bin").join(&name),
            mode: 0o755,
            content: Content::Built(name.clone()),
            etc: false,
        });
        for &shell in Shell::value_variants() {
            items.push(Item {
                path: completion_path(shell, &name),
                mode: 0o644,
                content: Content::Text(completions::script(shell, cmd.clone()).into_bytes()),
                etc: false,
            });
        }
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd)
            .render(&mut page)
            .map_err(|e| Error::System(format!("cannot render the man page of {name}: {e}")))?;
        items.push(Item {
            path: Path::new("share/man/man1").join(format!("{name}.1")),
            mode: 0o644,
            content: Content::Text(page),
            etc: false,
        });
    }
    items.push(Item {
        path: "lib/libgoset.so".into(),
        mode: 0o644,
        content: Content::Built("libgoset.so".into()),
        etc: false,
    });
    items.push(slurm_items(prefix));
    let service = NOISE_SERVICE.replace("@PREFIX@", &prefix.display().to_string());
    for (name, text) in [
        ("goset-noise.service", service.as_str()),
        ("goset-noise.timer", NOISE_TIMER),
    ] {
        items.push(Item {
            path: Path::new("lib/systemd/system").join(name),
            mode: 0o644,
            content: Content::Text(text.as_bytes().to_vec()),
            etc: false,
        });
    }
    Ok(items)
}

/// Writes `bytes` to `path` by [`goset_plan::rootfile::os::install`]: a temporary file of an
/// unguessable name, made with `O_EXCL|O_NOFOLLOW` in a directory walked to by the root-file
/// rule, renamed over `path`. A program being run from `path` keeps its old file (writing into
/// it would fail with ETXTBSY), a reader never sees half a file, and no planted link is
/// followed. Missing directories are made 0755, whatever the umask.
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), Error> {
    goset_plan::rootfile::os::install(path, bytes, mode)
        .map_err(|e| Error::System(format!("cannot write {}: {e}", path.display())))
}

fn install(place: &Place, from: Option<PathBuf>) -> Result<String, Error> {
    let root = place.root()?;
    let from = match from {
        Some(dir) => dir,
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.to_path_buf()))
            .ok_or_else(|| {
                Error::System("cannot tell where this program is: give --from DIR".into())
            })?,
    };
    // Every built file is read before anything is written: a tree half built installs nothing.
    let mut files = Vec::new();
    // In order (the first missing file is the one named), what goes with an optional file last.
    let mut items = std::collections::VecDeque::from(items(&place.prefix)?);
    while let Some(item) = items.pop_front() {
        let bytes = match item.content {
            Content::Text(text) => text,
            Content::Optional(name, with) => match std::fs::read(from.join(name)) {
                Ok(bytes) => {
                    items.extend(with);
                    bytes
                }
                Err(_) => continue,
            },
            Content::Built(name) => {
                let built = from.join(name);
                std::fs::read(&built).map_err(|e| {
                    Error::Usage(format!(
                        "{}: {e}: build first (cargo build --release --workspace), or give \
                         --from the directory that holds goset's programs and libgoset.so",
                        built.display()
                    ))
                })?
            }
        };
        files.push((place.under(item.etc)?.join(item.path), item.mode, bytes));
    }
    for (path, mode, bytes) in &files {
        write_file(path, bytes, *mode)?;
    }
    Ok(format!(
        "installed {} files under {}",
        files.len(),
        root.display()
    ))
}

fn uninstall(place: &Place) -> Result<String, Error> {
    let root = place.root()?;
    let mut removed = 0;
    let mut items = std::collections::VecDeque::from(items(&place.prefix)?);
    while let Some(item) = items.pop_front() {
        if let Content::Optional(_, with) = item.content {
            items.extend(with);
        }
        let path = place.under(item.etc)?.join(&item.path);
        // Walked to by the root-file rule: a directory link planted in the prefix is not
        // followed to remove a file elsewhere.
        let gone =
            goset_plan::rootfile::os::parent(&path, None).and_then(|(dir, name)| dir.remove(name));
        match gone {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::System(format!(
                    "cannot remove {}: {e}",
                    path.display()
                )))
            }
        }
    }
    Ok(format!("removed {removed} files under {}", root.display()))
}

fn main() {
    let cli = Cli::try_parse().unwrap_or_else(|e| goset::cli::exit_on_clap_error(e, "goset-dist"));
    let result = match cli.action {
        Action::Install { place, from } => install(&place, from),
        Action::Uninstall { place } => uninstall(&place),
        Action::Deb {
            from,
            out,
            maintainer,
            no_shlibdeps,
        } => deb::deb(deb::Deb {
            from,
            out,
            maintainer,
            no_shlibdeps,
        }),
    };
    match result {
        Ok(said) => println!("goset-dist: {said}"),
        Err(e) => {
            eprintln!("goset-dist: {e}");
            std::process::exit(e.exit_code());
        }
    }
}
