//! `cargo ekstazi completions <SHELL>` and `cargo ekstazi man`: generated
//! from the clap definitions; the bash script is loaded into a real bash
//! and asked to complete, as `cargo-ekstazi …` and as `cargo ekstazi …`.

use crate::support::Fixture;
use std::path::Path;

fn generated(f: &Fixture, args: &[&str]) -> String {
    let run = f.run(args);
    assert_eq!(run.code(), Some(0), "{run:?}");
    assert!(!run.stdout.is_empty(), "{run:?}");
    run.stdout
}

/// What bash completes for `words` (the last one being completed), after
/// loading `script`, with `setup` run first.
fn complete(f: &Fixture, script: &Path, setup: &str, words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let cword = words.len() - 1;
    let prev = if cword > 0 { words[cword - 1] } else { "" };
    let program = format!(
        "{setup}\nsource '{script}'\nCOMP_WORDS=({words}); COMP_CWORD={cword}\n\
         $(complete -p '{cmd}' | sed -n 's/.*-F \\([^ ]*\\).*/\\1/p') '{cmd}' '{cur}' '{prev}'\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script = script.display(),
        words = quoted.join(" "),
        cmd = words[0],
        cur = words[cword],
    );
    let output = f
        .program(Path::new("bash"))
        .args(["--norc", "--noprofile", "-c", &program])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_bash_completion_is_valid_and_completes_cargo_ekstazi() {
    let f = Fixture::new("history");
    let script = f.file("cargo-ekstazi.bash");
    std::fs::write(&script, generated(&f, &["completions", "bash"])).unwrap();
    let check = f
        .program(Path::new("bash"))
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");

    // As the program itself, and through cargo.
    assert_eq!(
        complete(&f, &script, "", &["cargo-ekstazi", "te"]),
        ["test"]
    );
    assert_eq!(
        complete(&f, &script, "", &["cargo", "ekstazi", "te"]),
        ["test"]
    );
    assert_eq!(
        complete(
            &f,
            &script,
            "",
            &["cargo", "ekstazi", "test", "--never-rec"]
        ),
        ["--never-record"]
    );
    assert!(
        complete(&f, &script, "", &["cargo", "ekstazi", "completions", ""])
            .contains(&"zsh".to_owned())
    );
    // Any other cargo command goes to the completion cargo had.
    let cargo_own = "_cargo() { COMPREPLY=(from-cargo); }; complete -F _cargo cargo";
    assert_eq!(
        complete(&f, &script, cargo_own, &["cargo", "bui"]),
        ["from-cargo"]
    );
    assert_eq!(
        complete(&f, &script, cargo_own, &["cargo", "ekstazi", "sta"]),
        ["stats"]
    );
}

#[test]
fn other_shells_and_the_manual_page_are_generated() {
    let f = Fixture::new("history");
    let zsh = generated(&f, &["completions", "zsh"]);
    // cargo's zsh completion calls `_cargo-<subcommand>` for `cargo <subcommand>`.
    assert!(zsh.starts_with("#compdef cargo-ekstazi\n"), "{zsh}");
    assert!(zsh.contains("\n_cargo-ekstazi() {"), "{zsh}");
    let fish = generated(&f, &["completions", "fish"]);
    assert!(fish.contains("complete -c cargo-ekstazi "), "{fish}");
    assert!(
        fish.contains("complete -c cargo -n \"__fish_cargo_using_subcommand ekstazi"),
        "{fish}"
    );
    for shell in ["elvish", "powershell"] {
        assert!(generated(&f, &["completions", shell]).contains("cargo-ekstazi"));
    }
    let run = f.run(&["completions", "tcsh"]);
    assert_eq!(run.code(), Some(2), "{run:?}");
    assert!(run.stderr.contains("possible values: bash"), "{run:?}");

    // roff: the title macro names the page, the synopsis the command as typed.
    let page = generated(&f, &["man"]);
    let title = page
        .lines()
        .find(|l| l.starts_with('.') && !l.starts_with(".ie") && !l.starts_with(".el"));
    assert!(
        title.is_some_and(|t| t.starts_with(".TH cargo-ekstazi 1 ")),
        "{page}"
    );
    assert!(page.contains("\\fBcargo ekstazi\\fR"), "{page}");
    let dir = f.file("man1");
    let run = f.run(&["man", "--dir", dir.to_str().unwrap()]);
    assert_eq!(run.code(), Some(0), "{run:?}");
    let test_page = std::fs::read_to_string(dir.join("cargo-ekstazi-test.1")).unwrap();
    assert!(test_page.contains("never\\-record"), "{test_page}");
}
