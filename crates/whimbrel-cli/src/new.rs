//! `whimbrel new NAME`: a project of one's own workflow, from the folder
//! `crates/whimbrel-cli/templates/new` (every `{{name}}` and `{{whimbrel}}`
//! in its paths and files replaced): a Cargo workspace with one activity
//! function on `whimbrel-core` (`src/greet.rs`, served by
//! `whimbrel_core::activity::run`) and its test, one static definition
//! (`workflows/NAME.json`), a `template.yaml` that nests the Whimbrel stack
//! of the checkout it was made from and adds the activity function (named
//! `whimbrel-task-NAME-greet`, under the default `LaunchTargetPrefix`), and
//! a Makefile whose `make up` runs both on the local stack, and the
//! checkout's `Cargo.lock` (the versions Whimbrel is tested with). README's "Your
//! first workflow" follows it, and `tests/e2e-new.sh` runs every command it
//! shows.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::CliError;

/// Options of `whimbrel new`.
#[derive(Args, Debug, Clone)]
pub struct NewArgs {
    /// The project's (and its workflow's) name: 1 to 40 of `a-z`, `0-9`
    /// and `-`, starting with a letter (it names a crate, a binary and a
    /// Lambda function).
    name: String,
    /// Where to create it (default: `./NAME`); it must not exist.
    #[arg(long)]
    path: Option<PathBuf>,
    /// The Whimbrel checkout the project depends on and nests (default:
    /// the one this program was built from).
    #[arg(long, env = "WHIMBREL_HOME")]
    whimbrel: Option<PathBuf>,
}

/// The template's files: (path, text), each with `{{name}}` and
/// `{{whimbrel}}` still in.
const FILES: [(&str, &str); 7] = [
    ("Cargo.toml", include_str!("../templates/new/Cargo.toml")),
    (
        "src/greet.rs",
        include_str!("../templates/new/src/greet.rs"),
    ),
    (
        "workflows/{{name}}.json",
        include_str!("../templates/new/workflows/{{name}}.json"),
    ),
    (
        "template.yaml",
        include_str!("../templates/new/template.yaml"),
    ),
    ("Makefile", include_str!("../templates/new/Makefile")),
    ("README.md", include_str!("../templates/new/README.md")),
    (".gitignore", include_str!("../templates/new/.gitignore")),
];

/// Whether `name` can name the crate, its binaries and its functions.
fn valid_name(name: &str) -> bool {
    (1..=40).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The Whimbrel checkout: `given`, else the one this program was built
/// from; it must hold `template.yaml` and `crates/whimbrel-core`.
fn checkout(given: Option<PathBuf>) -> Result<PathBuf, CliError> {
    let dir = given.unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    let dir = dir
        .canonicalize()
        .map_err(|e| CliError(format!("{}: {e} (--whimbrel)", dir.display())))?;
    if !dir.join("template.yaml").is_file() || !dir.join("crates/whimbrel-core").is_dir() {
        return Err(CliError(format!(
            "{} is not a Whimbrel checkout (no template.yaml and crates/whimbrel-core): give --whimbrel",
            dir.display()
        )));
    }
    Ok(dir)
}

/// The files of project `name` on checkout `whimbrel`: (relative path,
/// text). No I/O.
pub(crate) fn render(name: &str, whimbrel: &Path) -> Vec<(String, String)> {
    let home = whimbrel.display().to_string();
    let fill = |t: &str| t.replace("{{name}}", name).replace("{{whimbrel}}", &home);
    FILES.iter().map(|(p, t)| (fill(p), fill(t))).collect()
}

/// Create the project.
///
/// Errors: an invalid name, a path that exists, no Whimbrel checkout, or
/// a file that cannot be written.
pub fn run(args: NewArgs) -> Result<(), CliError> {
    if !valid_name(&args.name) {
        return Err(CliError(format!(
            "{:?}: a project name is 1 to 40 of a-z, 0-9 and -, starting with a letter",
            args.name
        )));
    }
    let home = checkout(args.whimbrel)?;
    let dir = args.path.unwrap_or_else(|| PathBuf::from(&args.name));
    if dir.exists() {
        return Err(CliError(format!("{} exists already", dir.display())));
    }
    for (rel, text) in render(&args.name, &home) {
        let path = dir.join(rel);
        let write = || {
            std::fs::create_dir_all(path.parent().unwrap_or(&dir))?;
            std::fs::write(&path, text)
        };
        write().map_err(|e| CliError(format!("{}: {e}", path.display())))?;
    }
    // The versions Whimbrel is built and tested with: the project's first
    // build resolves nothing new (and shares a target directory's builds).
    let lock = home.join("Cargo.lock");
    if lock.is_file() {
        std::fs::copy(&lock, dir.join("Cargo.lock"))
            .map_err(|e| CliError(format!("{}: {e}", lock.display())))?;
    }
    println!(
        "created {} (workflow {}, on {})",
        dir.display(),
        args.name,
        home.display()
    );
    println!(
        "next: cd {} && make test && make up   (README.md)",
        dir.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_cannot_name_a_function_are_refused() {
        for ok in ["hello", "a", "order-2-ship"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "Hello", "2fast", "a_b", "a b", &"x".repeat(41)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    /// Every placeholder is filled, and what the parts name agrees: the
    /// definition's launch target is the template's FunctionName, whose
    /// binary is the crate's.
    #[test]
    fn the_rendered_project_names_one_function_everywhere() {
        let files = render("hello", Path::new("/opt/whimbrel"));
        let get = |p: &str| &files.iter().find(|(f, _)| f == p).unwrap().1;
        assert!(files
            .iter()
            .all(|(p, t)| !p.contains("{{") && !t.contains("{{")));
        let plan: serde_json::Value = serde_json::from_str(get("workflows/hello.json")).unwrap();
        assert_eq!(plan["activities"][0]["lambda"], "whimbrel-task-hello-greet");
        let t = whimbrel_aws_model::template::Template::parse_tree(
            Path::new("/p/template.yaml"),
            get("template.yaml"),
            "whimbrel_",
            &Default::default(),
            &mut |_| Ok(include_str!("../../../template.yaml").to_string()),
        )
        .unwrap();
        let f = t.function("whimbrel-task-hello-greet").unwrap();
        assert_eq!(f.binary, "hello-greet");
        assert_eq!(f.async_config.maximum_retry_attempts, 0);
        assert!(get("Cargo.toml").contains("name = \"hello-greet\""));
        assert!(get("Cargo.toml").contains("path = \"/opt/whimbrel/crates/whimbrel-core\""));
    }
}
