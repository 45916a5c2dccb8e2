//! Packaging (issue #17): `rdv-directory man --out DIR` writes a man page for the
//! command and each subcommand, generated from the same definitions as
//! `--help`, and `rdv-directory completions SHELL` prints a completion script.

#[test]
fn man_pages_and_completions_name_every_subcommand() {
    rdv_service_kit::testing::assert_cli_docs(
        std::path::Path::new(env!("CARGO_BIN_EXE_rdv-directory")),
        "rdv-directory",
        &["serve", "keygen", "rotate", "stats", "man", "completions"],
    );
}
