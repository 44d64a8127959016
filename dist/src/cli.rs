//! `goset-dist`'s flags: where install, uninstall and deb write.

use clap::{Args, Parser, Subcommand};
use goset::error::Error;
use std::path::{Path, PathBuf};

/// goset-dist's command line.
#[derive(Parser, Debug)]
#[command(
    name = "goset-dist",
    version,
    about = "Install the built goset into a prefix, with man pages and shell completions"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub action: Action,
}

/// What goset-dist does.
#[derive(Subcommand, Debug)]
pub enum Action {
    /// Install goset, goset-run, goset-bench, libgoset.so, their man pages and their bash, zsh
    /// and fish completions.
    Install {
        #[command(flatten)]
        place: Place,
        /// The built programs and libgoset.so (default: the directory of this program, the
        /// cargo profile directory it was built in).
        #[arg(long, value_name = "DIR")]
        from: Option<PathBuf>,
    },
    /// Remove every file install puts under the prefix (directories stay).
    Uninstall {
        #[command(flatten)]
        place: Place,
    },
    /// Build a Debian package of what install puts under /usr, with dpkg-deb:
    /// OUT/goset_VERSION_ARCH.deb.
    Deb {
        /// The built programs and libgoset.so (default: the directory of this program).
        #[arg(long, value_name = "DIR")]
        from: Option<PathBuf>,
        /// Where the package is written (created if missing).
        #[arg(long, value_name = "DIR", default_value = ".")]
        out: PathBuf,
        /// The package's Maintainer field.
        #[arg(
            long,
            value_name = "NAME <EMAIL>",
            default_value = "goset maintainers <maintainers@goset.invalid>"
        )]
        maintainer: String,
        /// Compute Depends from the programs' ELF files (their libraries and symbol versions)
        /// even where dpkg-shlibdeps is installed; without it, that is what is done.
        #[arg(long)]
        no_shlibdeps: bool,
    },
}

/// Where the files go.
#[derive(Args, Debug)]
pub struct Place {
    /// The installation prefix, an absolute path: PREFIX/bin, PREFIX/lib, PREFIX/share.
    #[arg(long, value_name = "DIR", default_value = "/usr/local")]
    pub prefix: PathBuf,
    /// Stage the files under DIR/PREFIX instead (for a package build); the installed programs
    /// still find each other by PREFIX's layout.
    #[arg(long, value_name = "DIR")]
    pub destdir: Option<PathBuf>,
}

impl Place {
    /// The directory files are written under: PREFIX, or DESTDIR/PREFIX.
    pub fn root(&self) -> Result<PathBuf, Error> {
        let Ok(relative) = self.prefix.strip_prefix("/") else {
            return Err(Error::Usage(format!(
                "--prefix {}: must be an absolute path",
                self.prefix.display()
            )));
        };
        Ok(match &self.destdir {
            Some(dest) => dest.join(relative),
            None => self.prefix.clone(),
        })
    }

    /// The directory a file is written under: [`Place::root`], or with `etc` the system
    /// configuration directory, `/etc` for PREFIX `/usr` (as Debian's packages have it),
    /// else `PREFIX/etc`, under DESTDIR when staged.
    pub fn under(&self, etc: bool) -> Result<PathBuf, Error> {
        let root = self.root()?;
        if !etc {
            return Ok(root);
        }
        if self.prefix != Path::new("/usr") {
            return Ok(root.join("etc"));
        }
        Ok(match &self.destdir {
            Some(dest) => dest.join("etc"),
            None => "/etc".into(),
        })
    }
}
