//! `whimbrel instances` with real processes: it starts `--count`
//! instances of every function of the template from the function
//! directory, each told its function by the Lambda runtime's variables,
//! starts again an instance that exits, and refuses a function whose
//! binary is not built.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn temp_dir(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "whimbrel-instances-{what}-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const TEMPLATE: &str = "Resources:
  F:
    Type: AWS::Serverless::Function
    Metadata:
      BuildProperties:
        Binary: fake-fn
    Properties:
      MemorySize: 512
";

#[test]
fn every_function_gets_its_instances_started_again_when_they_exit() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("restart");
    let log = dir.join("starts.log");
    // A function that records what it was told, then exits at once.
    let fake = dir.join("fake-fn");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho \"$AWS_LAMBDA_FUNCTION_NAME $AWS_LAMBDA_RUNTIME_API $AWS_LAMBDA_FUNCTION_MEMORY_SIZE $AWS_LAMBDA_FUNCTION_VERSION $$\" >> \"$STARTS_LOG\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let template = dir.join("template.yaml");
    std::fs::write(&template, TEMPLATE).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_whimbrel"))
        .args([
            "instances",
            "--count",
            "2",
            "--lambda-upstream",
            "http://127.0.0.1:9/",
        ])
        .arg("--template")
        .arg(&template)
        .arg("--function-dir")
        .arg(&dir)
        .env("STARTS_LOG", &log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Two instances, each started again a second after it exits: six
    // starts come within a few seconds (20 s allows a crowded machine).
    let started = Instant::now();
    let lines = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(String::from).collect();
        if lines.len() >= 6 || started.elapsed() > Duration::from_secs(20) {
            break lines;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(lines.len() >= 6, "{lines:?}");
    let mut pids = std::collections::HashSet::new();
    for l in &lines {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(
            f[..4],
            [
                "fake-fn",
                "http://127.0.0.1:9/.rt/fake-fn",
                "512",
                "$LATEST"
            ],
            "{l}"
        );
        pids.insert(f[4].to_string());
    }
    assert_eq!(pids.len(), lines.len(), "each start is a new process");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_function_that_is_not_built_is_refused() {
    let dir = temp_dir("missing");
    let template = dir.join("template.yaml");
    std::fs::write(&template, TEMPLATE).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_whimbrel"))
        .args(["instances", "--template"])
        .arg(&template)
        .arg("--function-dir")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("fake-fn not found"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
