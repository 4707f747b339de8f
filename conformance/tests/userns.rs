//! The verified user namespace on the real host (spec 3.1, SR-12), as the
//! unprivileged test user.

use lazaret_conformance::test_user::{delegate, Delegation};
use lazaret_effects::userns::{
    plan_maps, spawn_in_user_namespace, Identity, MapKind, NamespaceMaps, RealHost,
    SubordinateRange,
};
use std::process::{Command, Stdio};

#[test]
fn child_runs_as_root_of_a_verified_namespace() -> Result<(), String> {
    if delegate("child_runs_as_root_of_a_verified_namespace", &[]).map_err(|e| e.to_string())?
        == Delegation::PassedAsTestUser
    {
        return Ok(());
    }
    let mut host = RealHost;
    let me = Identity::current(&mut host).map_err(|e| e.to_string())?;
    let maps = plan_maps(&mut host, &me).map_err(|e| e.to_string())?;
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        "id -u; id -g; cat /proc/self/uid_map /proc/self/gid_map",
    ])
    .stdout(Stdio::piped());
    let child = spawn_in_user_namespace(cmd, &mut host, &maps).map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let tokens: Vec<&str> = text.split_whitespace().collect();
    let uid_range = maps.uid[1].outside.to_string();
    let gid_range = maps.gid[1].outside.to_string();
    let uid = me.uid.to_string();
    let gid = me.gid.to_string();
    let expected = vec![
        "0", "0", "0", &uid, "1", "1", &uid_range, "65536", "0", &gid, "1", "1", &gid_range,
        "65536",
    ];
    assert_eq!(tokens, expected, "{text}");
    assert_eq!(
        maps.host_id(MapKind::Uid, 42),
        Some(maps.uid[1].outside + 41)
    );
    Ok(())
}

#[test]
fn a_map_the_host_refuses_never_runs_the_child() -> Result<(), String> {
    if delegate("a_map_the_host_refuses_never_runs_the_child", &[]).map_err(|e| e.to_string())?
        == Delegation::PassedAsTestUser
    {
        return Ok(());
    }
    let mut host = RealHost;
    let me = Identity::current(&mut host).map_err(|e| e.to_string())?;
    // A range this user does not own: the setuid helper refuses it.
    let foreign = SubordinateRange {
        start: 3_000_000,
        count: 65536,
    };
    let maps = NamespaceMaps::new(&me, foreign, foreign);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let marker = dir.path().join("ran");
    let mut cmd = Command::new("touch");
    cmd.arg(&marker);
    let err = spawn_in_user_namespace(cmd, &mut host, &maps)
        .map(|_| ())
        .map_err(|e| e.to_string());
    let msg = err.err().unwrap_or_default();
    assert!(msg.starts_with("newgidmap"), "{msg}");
    assert!(!marker.exists(), "the refused child ran");
    Ok(())
}
