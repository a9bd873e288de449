//! A `formwork serve` child process on a free loopback port, and a minimal HTTP/1.1
//! client over `TcpStream` (no client crate: the tests see the bytes on the wire).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct Server {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
    _dir: TempDir,
}

/// A temporary folder removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "formwork-serve-{tag}-{}-{:x}",
            std::process::id(),
            rand_u64()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.finish()
}

/// The model the serve tests run: the tests' `FORMWORK_MODEL` (README, the table of variables),
/// the smallest and fastest of the registry.
pub const TEST_MODEL: &str = "smollm2-135m";

impl Server {
    /// Start `formwork serve --port 0 ARGS` and wait until `/health` says ready.
    pub fn start(tag: &str, args: &[&str], envs: &[(&str, &str)]) -> Server {
        let dir = TempDir::new(tag);
        let log = dir.0.join("serve.log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_formwork"));
        cmd.args(["serve", "--port", "0", "--log"])
            .arg(&log)
            .args(args)
            .env("FORMWORK_MODEL", TEST_MODEL)
            .env("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn formwork serve");
        let mut s = Server {
            child,
            port: 0,
            log,
            _dir: dir,
        };
        let t = Instant::now();
        while s.port == 0 {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "no `listening` log line"
            );
            if let Some(st) = s.child.try_wait().unwrap() {
                panic!("formwork serve exited early: {st}");
            }
            for l in s.log_lines() {
                if l["event"] == "listening" {
                    let addr = l["addr"].as_str().unwrap();
                    s.port = addr.rsplit(':').next().unwrap().parse().unwrap();
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        loop {
            assert!(
                t.elapsed() < Duration::from_secs(300),
                "the model never loaded"
            );
            if let Some(st) = s.child.try_wait().unwrap() {
                panic!("formwork serve exited while loading: {st}");
            }
            if s.get("/health").status == 200 {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        s
    }

    pub fn log_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    pub fn get(&self, path: &str) -> Resp {
        self.request("GET", path, &[], b"")
    }

    pub fn post(&self, path: &str, body: &Value) -> Resp {
        self.request(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            body.to_string().as_bytes(),
        )
    }

    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        let mut s = self.connect();
        send(&mut s, method, path, headers, body);
        read_response(&mut s)
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(600))).unwrap();
        s
    }

    /// SIGTERM, as a supervisor stops it.
    pub fn terminate(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    /// A real chat completion still answers 200 (the server keeps serving).
    pub fn assert_serving(&self) {
        let r = self.post(
            "/v1/chat/completions",
            &serde_json::json!({
                "model": TEST_MODEL,
                "messages": [{"role": "user", "content": "Say hi."}],
                "max_completion_tokens": 3,
            }),
        );
        assert_eq!(r.status, 200, "the server stopped serving: {}", r.text());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn send(s: &mut TcpStream, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    // A server may answer (413) before reading all of a large body.
    let _ = s.write_all(body);
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, k: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(k))
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
    /// The `data:` payloads of an SSE body, and how many `: ping` comments it had.
    pub fn sse(&self) -> (Vec<String>, usize) {
        let mut data = Vec::new();
        let mut pings = 0;
        for l in self.text().lines() {
            if let Some(d) = l.strip_prefix("data: ") {
                data.push(d.to_string());
            } else if l.starts_with(": ping") {
                pings += 1;
            }
        }
        (data, pings)
    }
}

/// Reads the status line and headers.
pub fn read_head(r: &mut BufReader<&mut TcpStream>) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("bad status line {line:?}"))
        .parse()
        .unwrap();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    (status, headers)
}

pub fn read_response(s: &mut TcpStream) -> Resp {
    let mut r = BufReader::new(s);
    let (status, headers) = read_head(&mut r);
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            if r.read_line(&mut size).unwrap_or(0) == 0 {
                break;
            }
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            let mut buf = vec![0; n];
            r.read_exact(&mut buf).unwrap();
            body.extend_from_slice(&buf);
            let mut crlf = String::new();
            r.read_line(&mut crlf).unwrap();
        }
    } else {
        let _ = r.read_to_end(&mut body);
    }
    Resp {
        status,
        headers,
        body,
    }
}

/// Asserts the OpenAI error object: status, `type`, `code`, and a message.
pub fn assert_error(r: &Resp, status: u16, code: &str) -> Value {
    assert_eq!(r.status, status, "body: {}", r.text());
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("application/json")),
        "content-type {:?}",
        r.header("content-type")
    );
    assert!(r.header("x-request-id").is_some(), "no x-request-id");
    let v = r.json();
    let e = &v["error"];
    assert!(e.is_object(), "no error object: {v}");
    let keys: Vec<&String> = e.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["message", "type", "param", "code"], "{v}");
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(e["type"].is_string(), "{v}");
    assert_eq!(e["code"], code, "{v}");
    e.clone()
}
