//! The owner's discovery settings through the core (SPEC §4.5): the
//! directories an agent asks and the suggestions switch are commands like
//! every owner decision, kept in the records (each node here is rebuilt from
//! its records after every input), and, since the card carries neither,
//! they sign nothing and send nothing.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Net, setup};
use rdv_agent_core::directories::MAX_DIRECTORIES;
use rdv_agent_core::{Command, Error, Input};

const ALICE: usize = 0;

fn directories(net: &Net) -> Vec<String> {
    net.nodes[ALICE]
        .agent
        .state
        .profile()
        .unwrap()
        .directories
        .clone()
}

/// Runs a command on Alice; its output's effects, or the error.
fn run(net: &mut Net, c: Command) -> rdv_agent_core::Result<rdv_agent_core::Output> {
    let now = net.now;
    net.nodes[ALICE].handle(Input::Command(c), now)
}

fn add(url: &str) -> Command {
    Command::AddDirectory { url: url.into() }
}

fn remove(url: &str) -> Command {
    Command::RemoveDirectory { url: url.into() }
}

fn input_error(r: rdv_agent_core::Result<rdv_agent_core::Output>) -> String {
    match r {
        Err(Error::Input(m)) => m,
        other => panic!("expected an input error, got {other:?}"),
    }
}

#[test]
fn directories_are_added_listed_once_and_removed_by_the_core() {
    let mut net = Net::new(1);
    net.init(ALICE, &["alice@example.com"]);
    let card = net.card(ALICE);

    let out = run(&mut net, add("https://Dir.Example/")).unwrap();
    // Not on the card: nothing re-signed, published or sent.
    assert!(out.effects.is_empty(), "{:?}", out.effects);
    assert_eq!(net.card(ALICE), card);
    let reply = out.reply.unwrap();
    assert_eq!(reply["added"], "https://dir.example");
    assert_eq!(directories(&net), ["https://dir.example"]);
    run(&mut net, add("http://127.0.0.1:8480")).unwrap();
    assert_eq!(
        directories(&net),
        ["https://dir.example", "http://127.0.0.1:8480"]
    );

    // One directory is listed once, however it is written.
    let e = input_error(run(&mut net, add("https://dir.example")));
    assert!(e.contains("already a directory"), "{e}");
    let e = input_error(run(&mut net, add("HTTPS://DIR.EXAMPLE///")));
    assert!(e.contains("already a directory"), "{e}");

    // Removing: by any spelling of the same URL; an unknown one is not found.
    match run(&mut net, remove("https://other.example")) {
        Err(Error::NotFound(m)) => assert!(m.contains("is not a directory"), "{m}"),
        other => panic!("{other:?}"),
    }
    let out = run(&mut net, remove("https://DIR.example/")).unwrap();
    assert!(out.effects.is_empty());
    assert_eq!(out.reply.unwrap()["removed"], "https://dir.example");
    assert_eq!(directories(&net), ["http://127.0.0.1:8480"]);
    assert_eq!(net.card(ALICE), card);
}

#[test]
fn a_malformed_directory_url_is_refused_and_changes_nothing() {
    let mut net = Net::new(1);
    net.init(ALICE, &[]);
    let before = net.nodes[ALICE].snapshot();
    for (url, why) in [
        ("dir.example", "relative URL"),
        ("ftp://dir.example", "https:// or http://"),
        ("wss://dir.example", "https:// or http://"),
        ("https://", "empty host"),
        ("https://user:pw@dir.example", "user name or password"),
        ("https://dir.example/?q=1", "query or a fragment"),
        ("https://dir.example/#top", "query or a fragment"),
        ("https://dir .example", "spaces"),
        ("https://dir.example/\u{7}", "control"),
    ] {
        let e = input_error(run(&mut net, add(url)));
        assert!(
            e.contains("not a directory URL") && e.contains(why),
            "{url}: {e}"
        );
        let e = input_error(run(&mut net, remove(url)));
        assert!(e.contains("not a directory URL"), "{url}: {e}");
    }
    let long = format!("https://dir.example/{}", "a".repeat(300));
    assert!(input_error(run(&mut net, add(&long))).contains("over 256"));
    assert_eq!(net.nodes[ALICE].snapshot(), before);
    // The credentials never come back in the error.
    let e = input_error(run(&mut net, add("https://user:secret@dir.example")));
    assert!(e.contains("user name or password"), "{e}");
    assert!(!e.contains("secret") && !e.contains("user:"), "{e}");
    let e = input_error(run(&mut net, add("https://user:secret@dir example")));
    assert!(!e.contains("secret"), "{e}");
}

#[test]
fn at_most_sixteen_directories() {
    let mut net = Net::new(1);
    net.init(ALICE, &[]);
    for i in 0..MAX_DIRECTORIES {
        run(&mut net, add(&format!("https://d{i}.example"))).unwrap();
    }
    match run(&mut net, add("https://one-more.example")) {
        Err(Error::Refused(m)) => assert!(m.contains("at most 16"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(directories(&net).len(), MAX_DIRECTORIES);
}

#[test]
fn init_checks_and_folds_the_directories_it_is_given() {
    let mut net = Net::new(2);
    let mut s = setup(&[]);
    s.directories = vec![
        "https://dir.example/".into(),
        "https://DIR.example".into(),
        "http://127.0.0.1:9".into(),
    ];
    let now = net.now;
    net.nodes[0]
        .handle(Input::Command(Command::Init(s)), now)
        .unwrap();
    assert_eq!(
        directories(&net),
        ["https://dir.example", "http://127.0.0.1:9"]
    );

    let mut s = setup(&[]);
    s.directories = vec!["dir.example".into()];
    match net.nodes[1].handle(Input::Command(Command::Init(s)), now) {
        Err(Error::Input(m)) => assert!(m.contains("not a directory URL"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(
        net.nodes[1].records.is_empty(),
        "a refused init kept something"
    );
}

#[test]
fn suggestions_switch_through_the_core() {
    let mut net = Net::new(1);
    net.init(ALICE, &["alice@example.com"]);
    let card = net.card(ALICE);
    let suggest = |net: &Net| net.nodes[ALICE].agent.state.profile().unwrap().suggest;
    assert!(suggest(&net), "§4.5: on by default");

    let out = run(&mut net, Command::SetSuggest { on: false }).unwrap();
    assert!(out.effects.is_empty());
    assert_eq!(out.reply.unwrap()["was"], true);
    assert!(!suggest(&net), "kept in the records");
    assert_eq!(net.card(ALICE), card, "the card does not carry the switch");

    // Off again: nothing to write.
    let out = run(&mut net, Command::SetSuggest { on: false }).unwrap();
    assert!(out.writes.is_empty(), "{:?}", out.writes);
    assert_eq!(out.reply.unwrap()["was"], false);

    run(&mut net, Command::SetSuggest { on: true }).unwrap();
    assert!(suggest(&net));
}

#[test]
fn the_settings_need_an_agent() {
    let mut net = Net::new(1);
    for c in [
        Command::SetSuggest { on: false },
        add("https://dir.example"),
        remove("https://dir.example"),
    ] {
        assert!(matches!(run(&mut net, c), Err(Error::NoAgent)));
    }
}
