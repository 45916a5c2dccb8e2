//! `rdv directory add|remove|list` and `rdv suggest --on|--off` as a
//! process (SPEC §4.5): the settings change through the core and are kept in
//! the home; `--json` prints one object; malformed URLs, duplicates and
//! unknown directories are refused with a clear message and exit 1; the
//! directory-trying `remove --url --address --seed-file` still parses.
#![allow(clippy::unwrap_used)]

mod common;

use common::{init, ok_json, rdv, rdv_with, refused};

#[test]
fn directories_are_added_listed_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("a");
    init(&h, &["--directory", "https://one.example/"]);

    let l = ok_json(&h, &["directory", "list"]);
    assert_eq!(l["directories"], serde_json::json!(["https://one.example"]));
    assert_eq!(l["suggest"], true);

    let a = ok_json(&h, &["directory", "add", "https://Two.Example/"]);
    assert_eq!(a["added"], "https://two.example");
    assert_eq!(
        a["directories"],
        serde_json::json!(["https://one.example", "https://two.example"])
    );
    // Kept in the home: a new process sees it.
    let l = ok_json(&h, &["directory", "list"]);
    assert_eq!(l["directories"][1], "https://two.example");

    let e = refused(&h, &["directory", "add", "https://two.example"]);
    assert!(
        e.contains("https://two.example is already a directory"),
        "{e}"
    );
    let e = refused(&h, &["directory", "add", "two.example"]);
    assert!(e.contains("two.example: not a directory URL"), "{e}");
    let e = refused(&h, &["directory", "add", "https://me:hunter2@two.example"]);
    assert!(
        e.contains("user name or password") && !e.contains("hunter2"),
        "{e}"
    );
    let e = refused(&h, &["directory", "remove", "https://three.example"]);
    assert!(
        e.contains("https://three.example is not a directory of this agent"),
        "{e}"
    );

    let r = ok_json(&h, &["directory", "remove", "https://ONE.example"]);
    assert_eq!(r["removed"], "https://one.example");
    assert_eq!(r["directories"], serde_json::json!(["https://two.example"]));

    // Text output: one line per field.
    let o = rdv_with(&h, &[], &["directory", "list"]);
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(
        o.stdout,
        "directories: https://two.example\nsuggest: true\n"
    );
}

#[test]
fn with_no_directory_the_commands_that_need_one_say_how_to_add_one() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("a");
    init(&h, &["--address", "a@example.com"]);
    assert_eq!(
        ok_json(&h, &["directory", "list"])["directories"],
        serde_json::json!([])
    );
    let e = refused(&h, &["directory", "list-me"]);
    assert!(e.contains("rdv directory add URL"), "{e}");
    let e = refused(&h, &["directory", "add", "ftp://dir.example"]);
    assert!(e.contains("https:// or http://"), "{e}");
}

#[test]
fn suggestions_switch_through_the_core() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("a");
    init(&h, &[]);
    let v = ok_json(&h, &["suggest", "--off"]);
    assert_eq!(
        (v["suggest"].clone(), v["was"].clone()),
        (false.into(), true.into())
    );
    assert_eq!(ok_json(&h, &["suggest"])["suggest"], false);
    assert_eq!(ok_json(&h, &["directory", "list"])["suggest"], false);
    let v = ok_json(&h, &["suggest", "--on"]);
    assert_eq!(v["was"], false);
    assert_eq!(ok_json(&h, &["suggest"])["suggest"], true);
}

#[test]
fn remove_takes_a_url_or_the_directory_trying_flags_not_both() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("a");
    // Usage errors (clap: exit 2), before any home is opened.
    let o = rdv(&h, &["directory", "remove"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    let o = rdv(
        &h,
        &[
            "directory",
            "remove",
            "https://a.example",
            "--url",
            "https://b.example",
        ],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("cannot be used with"), "{}", o.stderr);
    let o = rdv(&h, &["directory", "remove", "--url", "https://b.example"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--address"), "{}", o.stderr);
    assert!(!h.exists(), "a usage error made a home");

    // The help names both forms.
    let o = rdv(&h, &["directory", "--help"]);
    for sub in [
        "add", "remove", "list", "list-me", "unlist", "publish", "lookup",
    ] {
        assert!(
            o.stdout.lines().any(|l| l.trim_start().starts_with(sub)),
            "{sub}: {}",
            o.stdout
        );
    }
    let o = rdv(&h, &["directory", "remove", "--help"]);
    assert!(
        o.stdout.contains("Stop using a directory") && o.stdout.contains("--seed-file"),
        "{}",
        o.stdout
    );
}
