//! The `ratomic simulate` sessions the docs show, run again and compared
//! with the page: `docs/choosing.md`, the project README and
//! `cli/README.md`. A ```` ```text ```` block whose first line is
//! `$ ratomic simulate …` (or `$ cargo run --release -p ratomic-cli --
//! simulate …`) is a session: each `$ ` line a command, the lines up to the
//! next one what it prints (stdout then stderr); `$ echo $?` prints the
//! previous command's exit status.
//!
//! Simulated time makes the output the same on every run but for one line,
//! the `clock` line's "took … of real time", which is compared up to that
//! figure. A line `⋮` on the page stands for rows left out: it matches any
//! number of lines, up to the next line the page shows. `ratomic bench` and
//! `--realtime` run on the real clock: their blocks are not sessions.

use std::path::Path;
use std::process::Command;

const PAGES: &[&str] = &["docs/choosing.md", "README.md", "cli/README.md"];

/// The ```text blocks of a page, with the line each starts on.
fn text_blocks(page: &str) -> Vec<(usize, Vec<&str>)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, Vec<&str>)> = None;
    for (n, line) in page.lines().enumerate() {
        match (&mut open, line.trim_start()) {
            (None, "```text") => open = Some((n + 1, Vec::new())),
            (Some(_), "```") => blocks.push(open.take().unwrap()),
            (Some((_, lines)), _) => lines.push(line),
            (None, _) => {}
        }
    }
    blocks
}

/// The arguments of a simulate command as the page writes it, or None for
/// any other command.
fn simulate_args(command: &str) -> Option<Vec<String>> {
    let args = command
        .strip_prefix("ratomic simulate")
        .or_else(|| command.strip_prefix("cargo run --release -p ratomic-cli -- simulate"))?;
    Some(std::iter::once("simulate").chain(args.split_whitespace()).map(str::to_owned).collect())
}

/// The line with the real-clock figure cut off: `clock  simulated (manual
/// clock: took 77.1µs of real time)` up to "took".
fn comparable(line: &str) -> &str {
    match line.find("(manual clock: took ") {
        Some(i) if line.trim_start().starts_with("clock ") && line.ends_with(" of real time)") => &line[..i],
        _ => line,
    }
}

/// Whether `actual` is what `shown` shows, `⋮` lines matching any run of lines.
fn shows(shown: &[&str], actual: &[&str]) -> bool {
    match shown.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first.trim() == "⋮" => (0..=actual.len()).any(|skip| shows(rest, &actual[skip..])),
        Some((first, rest)) => {
            actual.first().is_some_and(|a| comparable(a.trim_end()) == comparable(first.trim_end()))
                && shows(rest, &actual[1..])
        }
    }
}

#[test]
fn every_simulate_session_in_the_docs_prints_what_the_page_shows() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut sessions = 0;
    let mut failures = Vec::new();
    for page_path in PAGES {
        let page = std::fs::read_to_string(root.join(page_path)).unwrap();
        for (start, block) in text_blocks(&page) {
            let is_session = block.first().and_then(|l| l.strip_prefix("$ ")).and_then(simulate_args).is_some();
            if !is_session {
                continue;
            }
            // Split into commands and what each prints.
            let mut status = None;
            let mut i = 0;
            while i < block.len() {
                let command = block[i].strip_prefix("$ ").expect("a session line starts with `$ `");
                let end = block[i + 1..].iter().position(|l| l.starts_with("$ ")).map_or(block.len(), |p| i + 1 + p);
                let mut shown: Vec<&str> = block[i + 1..end].to_vec();
                while shown.last().is_some_and(|l| l.trim().is_empty()) {
                    shown.pop();
                }
                let printed = if command == "echo $?" {
                    format!("{}", status.expect("`echo $?` after a command"))
                } else {
                    let args = simulate_args(command).unwrap_or_else(|| {
                        panic!("{page_path}:{start}: a session runs `ratomic simulate`, not `{command}`")
                    });
                    assert!(
                        !args.iter().any(|a| a == "--realtime"),
                        "{page_path}:{start}: --realtime output is the real clock's"
                    );
                    let out = Command::new(env!("CARGO_BIN_EXE_ratomic")).args(&args).output().unwrap();
                    status = out.status.code();
                    String::from_utf8(out.stdout).unwrap() + &String::from_utf8(out.stderr).unwrap()
                };
                let printed: Vec<&str> = printed.trim_end().lines().collect();
                sessions += 1;
                if !shows(&shown, &printed) {
                    failures.push(format!(
                        "{page_path}, the block at line {start}: `$ {command}` printed\n{}\n--- where the page shows\n{}",
                        printed.join("\n"),
                        shown.join("\n")
                    ));
                }
                i = end;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // choosing.md's two, the README's one, cli/README.md's three and its two errors (with an `echo $?`).
    assert!(sessions >= 9, "{sessions} sessions found");
}
