//! `REWRITE EMBEDS ... USING "file"`: `check_file` reads the mapping next to the rule file, and a
//! missing or bad mapping is an error that names where.

use std::path::PathBuf;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rlm-rules-mapping-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const RULES: &str = "CLASS FAR IF IP.SRC == 10.6.*.*\nIF CLASS == FAR THEN\n  REWRITE EMBEDS AFTER 1 USING \"ims.map\"\n";

#[test]
fn the_mapping_is_read_from_the_rule_files_directory() {
    let d = dir("ok");
    std::fs::write(d.join("rules.rlm"), RULES).unwrap();
    std::fs::write(d.join("ims.map"), "/img/* /ims/*\n").unwrap();
    let rs = rules::check_file(&d.join("rules.rlm")).unwrap();
    let e = rs.embeds(rules::EmbedsId(0));
    assert_eq!(e.mapping.as_deref(), Some("ims.map"));
    let map = e.map.as_ref().expect("read");
    assert_eq!(map.map("/img/thumb/3.gif").as_deref(), Some("/ims/thumb/3.gif"));
    // compile alone does no I/O: the file is named, not read.
    let rs = rules::compile("rules.rlm", RULES).unwrap();
    assert!(rs.embeds(rules::EmbedsId(0)).map.is_none());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_missing_mapping_is_an_error_at_its_name_in_the_rule_file() {
    let d = dir("missing");
    std::fs::write(d.join("rules.rlm"), RULES).unwrap();
    let Err(rules::CheckError::Invalid(diags)) = rules::check_file(&d.join("rules.rlm")) else { panic!("accepted a missing mapping") };
    let e = &diags.0[0];
    assert_eq!((e.line, e.col), (3, 32), "{e}");
    assert!(e.file.ends_with("rules.rlm"));
    assert!(e.message.contains("cannot read the mapping file"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_bad_mapping_is_an_error_at_its_own_line_and_column() {
    let d = dir("bad");
    std::fs::write(d.join("rules.rlm"), RULES).unwrap();
    std::fs::write(d.join("ims.map"), "# small images\n/img/* /ims/*\n/img/logo.gif /img/small/logo.gif\n").unwrap();
    let Err(rules::CheckError::Invalid(diags)) = rules::check_file(&d.join("rules.rlm")) else { panic!("accepted a longer target") };
    let e = &diags.0[0];
    assert!(e.file.ends_with("ims.map"), "{e}");
    assert_eq!((e.line, e.col), (3, 15), "{e}");
    assert!(e.to_string().contains("both sides must be as long"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_mapping_or_rule_file_that_is_no_regular_file_is_refused_before_it_is_read() {
    // A symlink to /dev/zero as the mapping: reading it would never end (rlm's reload read it
    // whole, unbounded, to see whether it had changed). A FIFO would wait for a writer.
    let d = dir("device");
    std::fs::write(d.join("rules.rlm"), RULES).unwrap();
    std::os::unix::fs::symlink("/dev/zero", d.join("ims.map")).unwrap();
    let Err(rules::CheckError::Invalid(diags)) = rules::check_file(&d.join("rules.rlm")) else { panic!("accepted /dev/zero as a mapping") };
    assert!(diags.0[0].message.contains("is not a regular file"), "{}", diags.0[0]);
    assert_eq!(rules::read_bounded(std::path::Path::new("/dev/zero"), 10, "rule file"), Err("is not a regular file".to_string()));
    let Err(rules::CheckError::Io(e)) = rules::check_file(std::path::Path::new("/dev/zero")) else { panic!("accepted /dev/zero as a rule file") };
    assert!(e.contains("is not a regular file"), "{e}");
    // A regular file past the bound, and one within it.
    std::fs::write(d.join("big"), vec![b'#'; 11]).unwrap();
    assert_eq!(rules::read_bounded(&d.join("big"), 10, "rule file"), Err("11 bytes; a rule file may have at most 10".to_string()));
    assert_eq!(rules::read_bounded(&d.join("big"), 11, "rule file").map(|b| b.len()), Ok(11));
    let _ = std::fs::remove_dir_all(&d);
}
