//! deltaship's OCI image, built without a container engine by `deploy/image/build` (umoci),
//! checked as a runtime sees it: the layout's digests and sizes, the image config (user
//! 65532, entrypoint, command, port, labels naming the binary's version and commit), the
//! root file system's owners and modes, and its binary run as 65532 on a read-only root
//! (a mount namespace, chroot): `--version`, `check` against the test API server, and the
//! image's own command until its first sync, with /healthz answering. What scanners read:
//! the dpkg database names the build machine's packages, versions, owners and checksums of
//! every file the image holds but deltaship's own, and the SPDX SBOM deploy/image/sbom
//! writes agrees with it and with Cargo.lock.
//!
//! The image packs this test build's binary (`--binary`); `deploy/image/build` without it
//! packs a release build, the same way. Needs root (as the build does): the image's files
//! are owned by root and 65532.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use support::dpkg;

const TAG: &str = "test";
const USER: &str = "65532:65532";

struct Image {
    layout: PathBuf,
    /// The manifest's digest, `sha256:...`.
    digest: String,
    config: Value,
    root: PathBuf,
}

/// The blob of `digest` (`sha256:<hex>`), checked against its digest and size.
fn blob(layout: &Path, descriptor: &Value) -> Vec<u8> {
    let digest = descriptor["digest"].as_str().unwrap();
    let hex = digest.strip_prefix("sha256:").unwrap_or_else(|| panic!("{digest} is not a sha256 digest"));
    let bytes = std::fs::read(layout.join("blobs/sha256").join(hex)).unwrap();
    assert_eq!(format!("{:x}", Sha256::digest(&bytes)), hex, "blob {digest} does not match its digest");
    assert_eq!(bytes.len() as u64, descriptor["size"].as_u64().unwrap(), "blob {digest} is not of its size");
    bytes
}

/// Built once per run of this file, into the target directory (replaced each run).
fn image() -> &'static Image {
    static IMAGE: OnceLock<Image> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let layout = support::image::build("image/layout", TAG);
        let dir = layout.parent().unwrap().to_path_buf();

        let index: Value = serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
        let oci_layout: Value = serde_json::from_slice(&std::fs::read(layout.join("oci-layout")).unwrap()).unwrap();
        assert_eq!(oci_layout["imageLayoutVersion"], "1.0.0");
        let descriptor = index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == TAG)
            .unwrap_or_else(|| panic!("no manifest tagged {TAG} in {index}"));
        assert_eq!(descriptor["mediaType"], "application/vnd.oci.image.manifest.v1+json");
        let manifest: Value = serde_json::from_slice(&blob(&layout, descriptor)).unwrap();
        assert_eq!(manifest["config"]["mediaType"], "application/vnd.oci.image.config.v1+json");
        let config: Value = serde_json::from_slice(&blob(&layout, &manifest["config"])).unwrap();

        // Unpack the layers in order, as a runtime does (one layer here, so no whiteouts).
        let layers = manifest["layers"].as_array().unwrap();
        assert_eq!(layers.len(), config["rootfs"]["diff_ids"].as_array().unwrap().len());
        let root = dir.join("rootfs");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        for layer in layers {
            assert_eq!(layer["mediaType"], "application/vnd.oci.image.layer.v1.tar+gzip");
            let file = dir.join("layer.tar.gz");
            std::fs::write(&file, blob(&layout, layer)).unwrap();
            let untar = Command::new("tar").args(["--numeric-owner", "-xzpf"]).arg(&file).arg("-C").arg(&root).output().unwrap();
            assert!(untar.status.success(), "{}", String::from_utf8_lossy(&untar.stderr));
            std::fs::remove_file(&file).unwrap();
        }
        let digest = descriptor["digest"].as_str().unwrap().to_owned();
        Image { layout, digest, config, root }
    })
}

/// The image's entrypoint and then `args`, as `user`, on the image's root mounted read-only
/// with `conf` mounted read-only at /etc/deltaship, /proc and /dev as a runtime gives them.
fn in_image(user: &str, conf: &Path, args: &[&str]) -> Command {
    let image = image();
    let entrypoint: Vec<&str> = image.config["config"]["Entrypoint"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    let script = r#"set -e
root=$1; conf=$2; user=$3; shift 3
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount --bind "$conf" "$root/etc/deltaship"
mount -o remount,bind,ro "$root/etc/deltaship"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
# Only the image's environment: what the runtime sets from its config, and HOME.
exec env -i PATH=/usr/local/bin HOME=/home/nonroot "$(command -v chroot)" --userspec="$user" "$root" "$@""#;
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", script, "sh"]).arg(&image.root).arg(conf).arg(user).args(&entrypoint).args(args);
    cmd
}

/// A directory to mount at /etc/deltaship: `deltaship.yaml` (stdout sink, ConfigMaps of
/// kube-system) and the test API server's kubeconfig, readable by 65532 only.
fn conf_dir(listen: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(support::unique("image-conf"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(support::env().kubeconfig, dir.join("kubeconfig")).unwrap();
    std::fs::write(
        dir.join("deltaship.yaml"),
        format!(
            "cluster: image-test\nkubernetes: {{kubeconfig: /etc/deltaship/kubeconfig}}\n\
             resources: [{{version: v1, kind: ConfigMap, namespaces: [kube-system]}}]\n\
             sink: {{type: stdout}}\nhttp: {{listen: '{listen}'}}\nlog: {{format: json}}\n"
        ),
    )
    .unwrap();
    for f in ["kubeconfig", "deltaship.yaml"] {
        set_owner_and_mode(&dir.join(f), "65532:65532", "0400");
    }
    set_owner_and_mode(&dir, "65532:65532", "0500");
    dir
}

fn set_owner_and_mode(path: &Path, owner: &str, mode: &str) {
    assert!(Command::new("chown").arg(owner).arg(path).status().unwrap().success());
    assert!(Command::new("chmod").arg(mode).arg(path).status().unwrap().success());
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn the_layout_and_config_are_what_a_runtime_needs() {
    let image = image();
    let c = &image.config;
    assert_eq!((c["os"].as_str(), c["architecture"].as_str()), (Some("linux"), Some("amd64")));
    let config = &c["config"];
    assert_eq!(config["User"], USER);
    assert_eq!(config["Entrypoint"], serde_json::json!(["/usr/local/bin/deltaship"]));
    assert_eq!(config["Cmd"], serde_json::json!(["run", "--config", "/etc/deltaship/deltaship.yaml"]));
    assert!(config["ExposedPorts"]["9090/tcp"].is_object(), "{config}");
    // The labels name what the packed binary says of itself.
    let version = Command::new(env!("CARGO_BIN_EXE_deltaship")).arg("--version").output().unwrap();
    let version = String::from_utf8(version.stdout).unwrap();
    let labels = &config["Labels"];
    assert_eq!(
        format!(
            "deltaship {} ({})\n",
            labels["org.opencontainers.image.version"].as_str().unwrap(),
            labels["org.opencontainers.image.revision"].as_str().unwrap()
        ),
        version
    );
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    assert_eq!(labels["org.opencontainers.image.title"], "deltaship");
    assert!(image.layout.join("index.json").is_file());
}

#[test]
fn the_root_file_system_has_no_shell_and_the_owners_a_nonroot_user_needs() {
    let root = &image().root;
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
    assert!(passwd.lines().any(|l| l.starts_with("nonroot:x:65532:65532:")), "{passwd}");
    for absent in ["bin/sh", "usr/bin/sh", "bin/bash", "usr/bin/apt"] {
        assert!(!root.join(absent).exists(), "{absent} is in the image");
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let home = std::fs::metadata(root.join("home/nonroot")).unwrap();
    assert_eq!((home.uid(), home.gid(), home.permissions().mode() & 0o7777), (65532, 65532, 0o700));
    let tmp = std::fs::metadata(root.join("tmp")).unwrap();
    assert_eq!(tmp.permissions().mode() & 0o7777, 0o1777);
    let bin = std::fs::metadata(root.join("usr/local/bin/deltaship")).unwrap();
    assert_eq!((bin.uid(), bin.permissions().mode() & 0o7777), (0, 0o755));
    for f in ["etc/ssl/certs/ca-certificates.crt", "usr/share/doc/deltaship/LICENSE", "usr/share/doc/libc6/copyright"] {
        assert!(root.join(f).is_file(), "{f} is not in the image");
    }
}

#[test]
fn the_binary_runs_version_and_check_as_nonroot_on_a_read_only_root() {
    let conf = conf_dir("127.0.0.1:9090");
    let out = in_image(USER, &conf, &["--version"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(concat!("deltaship ", env!("CARGO_PKG_VERSION"), " (")), "{}", text(&out));

    let out = in_image(USER, &conf, &["check", "--config", "/etc/deltaship/deltaship.yaml"]).output().unwrap();
    let said = text(&out);
    assert!(out.status.success(), "check in the image failed:\n{said}");
    assert!(said.contains("[ok]") && !said.contains("[FAIL]"), "{said}");

    // Another user cannot read the configuration: the user really is 65532, not root.
    let out = in_image("65533:65533", &conf, &["check", "--config", "/etc/deltaship/deltaship.yaml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(support::bridge::EXIT_CONFIG), "as 65533:\n{}", text(&out));
    std::fs::remove_dir_all(&conf).unwrap();
}

/// The image's own command (`run --config /etc/deltaship/deltaship.yaml`) writes nothing to
/// its root: it syncs, answers /healthz, and stops on SIGTERM with 0.
#[test]
fn the_images_command_syncs_on_a_read_only_root() {
    let listen = format!("127.0.0.1:{}", support::bridge::free_port());
    let conf = conf_dir(&listen);
    let cmd: Vec<&str> = image().config["config"]["Cmd"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    let mut child = in_image(USER, &conf, &cmd).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if line.contains("\"dev.deltaship.sync.completed\"") && tx.send(line).is_err() {
                return;
            }
        }
    });
    let synced = rx.recv_timeout(Duration::from_secs(120));
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut health = None;
    while synced.is_ok() && Instant::now() < deadline {
        health = support::bridge::http_get(&listen, "/healthz");
        if health.as_ref().is_some_and(|(code, _)| *code == 200) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // unshare, sh and chroot exec one another: the child is deltaship itself.
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(synced.is_ok(), "no sync.completed from the image's command within 120 s:\n{stderr}");
    assert_eq!(health.map(|(code, _)| code), Some(200), "/healthz:\n{stderr}");
    assert!(status.success(), "exit {status:?} after SIGTERM:\n{stderr}");
    assert!(!stderr.contains("Read-only file system"), "{stderr}");
    std::fs::remove_dir_all(&conf).unwrap();
}

/// `md5sum` of files: path to digest.
fn md5sums(files: &[PathBuf]) -> BTreeMap<PathBuf, String> {
    let out = Command::new("md5sum").args(files).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| (PathBuf::from(&l[34..]), l[..32].to_owned())).collect()
}

fn host(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(out.status.success(), "{program} {args:?}: {}", text(&out));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_dpkg_database_is_the_build_machines_for_every_file_the_image_takes_from_it() {
    let root = &image().root;
    let packages = dpkg::database(root);
    let names: Vec<&str> = packages.iter().map(|p| p.binary.as_str()).collect();
    for must in ["base-files", "libc6:amd64", "libssl3:amd64", "ca-certificates"] {
        assert!(names.contains(&must), "{must} is not in the image's dpkg database: {names:?}");
    }
    // Debian's own identification, as scanners read it.
    assert_eq!(std::fs::read_link(root.join("etc/os-release")).unwrap(), Path::new("../usr/lib/os-release"));
    assert_eq!(std::fs::read_to_string(root.join("usr/lib/os-release")).unwrap(), std::fs::read_to_string("/usr/lib/os-release").unwrap());
    assert_eq!(std::fs::read_to_string(root.join("etc/debian_version")).unwrap(), std::fs::read_to_string("/etc/debian_version").unwrap());

    let mut files = Vec::new();
    for p in &packages {
        let said = host("dpkg-query", &["-W", "-f", "${Version} ${Architecture} ${Status}", &p.binary]);
        let f = &p.fields;
        assert_eq!(said, format!("{} {} {}", f["Version"], f["Architecture"], f["Status"]), "{}: the image's stanza and this machine's dpkg", p.binary);
        assert_eq!(f["Status"], "install ok installed");
        // Checksums: the image's (md5sums, or Conffiles for a conffile) equal this machine's.
        let md5 = std::fs::read_to_string(root.join(format!("var/lib/dpkg/info/{}.md5sums", p.binary))).unwrap_or_default();
        let ours: BTreeMap<String, String> =
            dpkg::checksum_lines(&md5).into_iter().chain(dpkg::checksum_lines(f.get("Conffiles").map_or("", String::as_str))).collect();
        let control = host("dpkg-query", &["--control-path", &p.binary, "md5sums"]);
        let host_md5 = std::fs::read_to_string(control.trim()).unwrap_or_default();
        let theirs: BTreeMap<String, String> =
            dpkg::checksum_lines(&host_md5).into_iter().chain(dpkg::checksum_lines(&host("dpkg-query", &["-W", "-f", "${Conffiles}", &p.binary]))).collect();
        let mut regular = 0;
        for path in p.listed.iter().filter(|l| *l != "/.") {
            let meta = std::fs::symlink_metadata(root.join(&path[1..])).unwrap_or_else(|e| panic!("{} lists {path}, not in the image: {e}", p.binary));
            if meta.is_file() {
                regular += 1;
                let digest = ours.get(path).unwrap_or_else(|| panic!("{} has no checksum of {path}", p.binary));
                assert_eq!(Some(digest), theirs.get(path), "{path}: the image's checksum and this machine's dpkg");
                files.push((root.join(&path[1..]), digest.clone()));
            }
        }
        assert!(regular > 0, "{} holds no file in the image", p.binary);
    }
    let actual = md5sums(&files.iter().map(|(f, _)| f.clone()).collect::<Vec<_>>());
    for (file, digest) in &files {
        assert_eq!(&actual[file], digest, "{} is not the file dpkg's checksum names", file.display());
    }
    // dpkg itself reads the image's database: every file listed is there, as its checksum says.
    let verify = Command::new("dpkg").arg(format!("--root={}", root.display())).arg("--verify").output().unwrap();
    assert!(verify.status.success() && verify.stdout.is_empty() && verify.stderr.is_empty(), "dpkg --verify of the image:\n{}", text(&verify));

    // Each path (not a directory) is its package's on this machine: one dpkg-query for all.
    let mut owner = BTreeMap::new();
    for p in &packages {
        for path in p.listed.iter().filter(|l| *l != "/." && !std::fs::symlink_metadata(root.join(&l[1..])).unwrap().is_dir()) {
            owner.insert(path.clone(), p.binary.clone());
        }
    }
    let paths: Vec<&str> = owner.keys().map(String::as_str).collect();
    let said = host("dpkg-query", &[&["-S"][..], &paths].concat());
    for (path, package) in &owner {
        let line = said
            .lines()
            .find(|l| l.ends_with(&format!(": {path}")) && !l.starts_with("diversion by"))
            .unwrap_or_else(|| panic!("dpkg-query -S knows no {path}:\n{said}"));
        let owners: Vec<&str> = line[..line.len() - path.len() - 2].split(", ").collect();
        assert!(owners.contains(&package.as_str()), "{path}: the image says {package}, this machine's dpkg {owners:?}");
    }
}

#[test]
fn every_file_in_the_image_is_a_listed_packages_or_deltaships_own() {
    let root = &image().root;
    let packages = dpkg::database(root);
    let mut unlisted = dpkg::files(root);
    for p in &packages {
        for path in &p.listed {
            unlisted.remove(path);
        }
    }
    // deltaship's binary and licence; the files deploy/image/build writes (users, name
    // lookups, the dpkg database); the CA bundle, which update-ca-certificates generates from
    // the package ca-certificates (no package lists it).
    let mut own: BTreeSet<String> = [
        "/usr/local/bin/deltaship",
        "/usr/share/doc/deltaship/LICENSE",
        "/etc/passwd",
        "/etc/group",
        "/etc/nsswitch.conf",
        "/etc/ssl/certs/ca-certificates.crt",
        "/var/lib/dpkg/status",
        "/var/lib/dpkg/info/format",
    ]
    .map(str::to_owned)
    .into();
    for p in &packages {
        own.insert(format!("/var/lib/dpkg/info/{}.list", p.binary));
        if root.join(format!("var/lib/dpkg/info/{}.md5sums", p.binary)).exists() {
            own.insert(format!("/var/lib/dpkg/info/{}.md5sums", p.binary));
        }
    }
    assert_eq!(unlisted, own, "files of the image that no package of its dpkg database lists");
}

#[test]
fn the_sbom_names_the_image_by_digest_and_agrees_with_the_dpkg_database_and_cargo_lock() {
    let image = image();
    let out = image.layout.parent().unwrap().join("sbom.spdx.json");
    let made = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/image/sbom"))
        .args(["--layout", image.layout.to_str().unwrap(), "--tag", TAG, "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(made.status.success(), "deploy/image/sbom failed:\n{}", text(&made));
    let sbom: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!((sbom["spdxVersion"].as_str(), sbom["dataLicense"].as_str()), (Some("SPDX-2.3"), Some("CC0-1.0")));
    let packages = sbom["packages"].as_array().unwrap();
    let by_purpose = |purpose: &str| packages.iter().filter(|p| p["primaryPackagePurpose"] == purpose).collect::<Vec<_>>();
    let purl = |p: &Value| {
        p["externalRefs"].as_array().and_then(|r| r.iter().find(|r| r["referenceType"] == "purl")).map(|r| r["referenceLocator"].as_str().unwrap().to_owned())
    };

    let [container] = by_purpose("CONTAINER")[..] else { panic!("not one CONTAINER package: {packages:#?}") };
    assert_eq!(sbom["documentDescribes"], json!([container["SPDXID"]]));
    assert_eq!(format!("sha256:{}", container["checksums"][0]["checksumValue"].as_str().unwrap()), image.digest, "the image's manifest digest");

    let [os] = by_purpose("OPERATING-SYSTEM")[..] else { panic!("not one OPERATING-SYSTEM package") };
    let release = std::fs::read_to_string(image.root.join("usr/lib/os-release")).unwrap();
    for (key, field) in [("ID", "name"), ("VERSION_ID", "versionInfo")] {
        let value = release.lines().find_map(|l| l.strip_prefix(&format!("{key}="))).unwrap().trim_matches('"');
        assert_eq!(os[field], value, "{key}");
    }

    // The Debian packages: exactly the dpkg database's, by name, version and architecture.
    let debs: BTreeSet<(String, String, String)> = packages
        .iter()
        .filter(|p| purl(p).is_some_and(|u| u.starts_with("pkg:deb/debian/")))
        .map(|p| {
            let u = purl(p).unwrap();
            let arch = u.split(['?', '&']).find_map(|q| q.strip_prefix("arch=")).unwrap().to_owned();
            (p["name"].as_str().unwrap().to_owned(), p["versionInfo"].as_str().unwrap().to_owned(), arch)
        })
        .collect();
    let dpkg: BTreeSet<(String, String, String)> =
        dpkg::database(&image.root).into_iter().map(|p| (p.fields["Package"].clone(), p.fields["Version"].clone(), p.fields["Architecture"].clone())).collect();
    assert_eq!(debs, dpkg);

    // The crates: each at Cargo.lock's version and checksum; deltaship the application; its
    // runtime dependencies in, the dev-dependencies out.
    let lock: toml::Value = toml::from_str(&std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock")).unwrap()).unwrap();
    let locked: BTreeMap<(&str, &str), Option<&str>> = lock["package"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| ((p["name"].as_str().unwrap(), p["version"].as_str().unwrap()), p.get("checksum").and_then(|c| c.as_str())))
        .collect();
    let crates: Vec<&Value> = packages.iter().filter(|p| purl(p).is_some_and(|u| u.starts_with("pkg:cargo/"))).collect();
    for c in &crates {
        let key = (c["name"].as_str().unwrap(), c["versionInfo"].as_str().unwrap());
        let checksum = locked.get(&key).unwrap_or_else(|| panic!("{key:?} is not in Cargo.lock"));
        assert_eq!(c["checksums"][0]["checksumValue"].as_str(), *checksum, "{key:?}'s checksum");
    }
    let [app] = by_purpose("APPLICATION")[..] else { panic!("not one APPLICATION package") };
    assert_eq!((app["name"].as_str(), app["versionInfo"].as_str()), (Some("deltaship"), Some(env!("CARGO_PKG_VERSION"))));
    let names: BTreeSet<&str> = crates.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for linked in ["rdkafka", "rdkafka-sys", "kube-client", "tokio", "rustls"] {
        assert!(names.contains(linked), "{linked} is not in the SBOM");
    }
    for dev_only in ["proptest", "divan", "jsonschema", "sonic-rs", "simd-json"] {
        assert!(!names.contains(dev_only), "{dev_only}, a dev-dependency, is in the SBOM");
    }
    // Each package is related to the image: contained, or linked into deltaship.
    let related: BTreeSet<&str> = sbom["relationships"].as_array().unwrap().iter().map(|r| r["relatedSpdxElement"].as_str().unwrap()).collect();
    for p in packages {
        assert!(related.contains(p["SPDXID"].as_str().unwrap()), "{} is related to nothing", p["SPDXID"]);
    }
}
