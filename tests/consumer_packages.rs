//! The consumer libraries as their users get them: each is built into its ecosystem's
//! artifact, installed from it into an empty cache the usual way, and used by a project of
//! its own outside the repository (tests/packages/) that rebuilds every shared test vector
//! through the installed library's public API: a wheel in a fresh virtual environment, a
//! Go module from a module proxy into an empty module cache, a Maven artifact into an empty
//! local repository. Each also shows what its users depend on: no broker client unless
//! they ask for one, no logging binding, and a major version that is the contract's. And
//! `consumers/reference` generates each one's API reference with its ecosystem's tool.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;

use support::consumers::{dir as consumers, java_version, run};

/// The vectors each user project checks: the recorded runs, the hostile and the
/// count-and-digest ones (76 streams and clusters when this was written).
const VECTORS_AT_LEAST: u64 = 70;

/// Held by the tests that run Maven in consumers/java: both write its target/.
static MAVEN: Mutex<()> = Mutex::new(());

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// An empty directory of this test run.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(support::unique(name));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A user project's one JSON line: every vector rebuilt, none failed, and the library's
/// contract version equal to `major`.
fn assert_every_vector_passed(said: &str, major: &str, what: &str) -> Value {
    let facts: Value = serde_json::from_str(said.trim()).unwrap_or_else(|e| panic!("{what} printed no JSON line ({e}): {said}"));
    assert!(facts["checked"].as_u64().unwrap_or(0) >= VECTORS_AT_LEAST, "{what}: {facts}");
    assert_eq!(facts["failures"], serde_json::json!([]), "{what}");
    assert_eq!(facts["contract"].to_string(), major, "{what}: the major version is the contract version the library reads");
    facts
}

#[test]
fn the_python_wheel_installs_alone_into_a_clean_venv_and_passes_every_vector() {
    let python = support::var("DELTASHIP_TEST_PYTHON");
    let work = scratch("wheel");
    // A copy, so that the build's own files stay out of the repository (LICENSE, a link,
    // copied as the file).
    run(Command::new("cp").arg("-rL").arg(consumers().join("python")).arg(work.join("src")), "copy consumers/python");
    let mut wheel = Command::new(&python);
    // Built the usual way: in isolation, with the setuptools the pyproject.toml asks for.
    wheel.args(["-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps", "-w"]).arg(work.join("dist")).arg(work.join("src"));
    run(wheel, "pip wheel consumers/python");
    let wheels: Vec<PathBuf> = std::fs::read_dir(work.join("dist")).unwrap().map(|e| e.unwrap().path()).collect();
    let [wheel] = wheels.as_slice() else { panic!("one wheel built: {wheels:?}") };
    let name = wheel.file_name().unwrap().to_str().unwrap();
    let version = name.strip_prefix("deltaship_consumer-").and_then(|n| n.strip_suffix("-py3-none-any.whl")).unwrap_or_else(|| panic!("{name}"));

    let venv = work.join("venv");
    run(Command::new(&python).args(["-m", "venv"]).arg(&venv), "python -m venv");
    // No index: nothing but the wheel can be installed, so the library needs nothing else.
    let mut install = Command::new(venv.join("bin/pip"));
    install.args(["install", "--disable-pip-version-check", "--no-index"]).arg(wheel);
    run(install, "pip install the wheel");
    let mut check = Command::new(venv.join("bin/python"));
    check.arg(root().join("tests/packages/python/check_vectors.py")).arg(root().join("vectors")).current_dir(&work).env_remove("PYTHONPATH");
    let major = version.split('.').next().unwrap();
    let facts = assert_every_vector_passed(&run(check, "check_vectors.py"), major, "the installed wheel");

    assert_eq!(facts["version"], version);
    assert!(facts["file"].as_str().unwrap().starts_with(venv.to_str().unwrap()), "imported from the venv: {facts}");
    assert_eq!(facts["typed"], true, "py.typed installed");
    assert_eq!(facts["license"], "Apache-2.0", "an SPDX license expression");
    assert_eq!(facts["extras"], serde_json::json!(["kafka", "nats"]));
    let requires: Vec<&str> = facts["requires"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    assert!(requires.len() == 2 && requires.iter().all(|r| r.contains("; extra == ")), "only the extras require anything: {requires:?}");
    assert!(requires.iter().any(|r| r.starts_with("confluent-kafka") && r.contains(">=")), "a range, not a pin: {requires:?}");
    // Without its extra, a reader names the one to install.
    assert!(facts["missing"]["read_kafka"].as_str().unwrap().contains("pip install 'deltaship-consumer[kafka]'"), "{facts}");
    assert!(facts["missing"]["read_jetstream"].as_str().unwrap().contains("pip install 'deltaship-consumer[nats]'"), "{facts}");
    std::fs::remove_dir_all(&work).unwrap();
}

/// A module zip as `go mod download` serves it: every file of `dir` under
/// `<module>@<version>/`, without the directories of nested modules (their own go.mod).
fn module_zip(dir: &Path, prefix: &str, zip: &Path) {
    let script = r#"
import os, sys, zipfile
root, out, prefix = sys.argv[1:4]
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and not os.path.isfile(os.path.join(d, x, "go.mod")))
        for f in sorted(files):
            z.write(os.path.join(d, f), prefix + os.path.relpath(os.path.join(d, f), root))
"#;
    let mut zipper = Command::new(support::var("DELTASHIP_TEST_PYTHON"));
    zipper.args(["-c", script]).arg(dir).arg(zip).arg(prefix);
    run(zipper, "zip the Go module");
}

#[test]
fn the_go_module_resolves_from_a_module_proxy_into_an_empty_cache_and_passes_every_vector() {
    let source = consumers().join("go");
    let go_mod = std::fs::read_to_string(source.join("go.mod")).unwrap();
    let module = go_mod.lines().next().and_then(|l| l.strip_prefix("module ")).expect("go.mod's module line");
    let major = module.rsplit_once("/v").map(|(_, m)| m).filter(|m| m.parse::<u32>().is_ok()).unwrap_or_else(|| panic!("{module}: no /vN suffix"));
    let version = format!("v{major}.0.0");
    assert!(go_mod.lines().any(|l| l == "go 1.23.0"), "the Go floor for users is 1.23.0:\n{go_mod}");

    // The dependencies (sarama, nats.go), into the usual module cache: the proxy below
    // serves them from its download directory, as a module proxy would.
    let go = |dir: &Path| {
        let mut cmd = Command::new("go");
        cmd.current_dir(dir).env("GOTOOLCHAIN", "local").env("GOWORK", "off");
        cmd
    };
    let mut download = go(&source);
    download.args(["mod", "download"]);
    run(download, "go mod download in consumers/go");
    let mut env = go(&source);
    env.args(["env", "GOMODCACHE"]);
    let usual = PathBuf::from(run(env, "go env GOMODCACHE").trim());

    let work = scratch("gomod");
    let at = work.join("proxy").join(module).join("@v");
    std::fs::create_dir_all(&at).unwrap();
    std::fs::write(at.join("list"), format!("{version}\n")).unwrap();
    std::fs::write(at.join(format!("{version}.info")), format!(r#"{{"Version":"{version}","Time":"2026-01-01T00:00:00Z"}}"#)).unwrap();
    std::fs::write(at.join(format!("{version}.mod")), &go_mod).unwrap();
    module_zip(&source, &format!("{module}@{version}/"), &at.join(format!("{version}.zip")));

    let project = work.join("project");
    std::fs::create_dir_all(&project).unwrap();
    for file in ["go.mod", "main.go"] {
        std::fs::copy(root().join("tests/packages/go").join(file), project.join(file)).unwrap();
    }
    let wants = std::fs::read_to_string(project.join("go.mod")).unwrap();
    assert!(wants.contains(&format!("require {module} {version}")), "tests/packages/go/go.mod requires {module} {version}:\n{wants}");
    // An empty module cache; modules only from the local proxy (no `direct`, no network),
    // whose sums no checksum database knows.
    let user = |args: &[&str]| {
        let mut cmd = go(&project);
        cmd.args(args)
            .env("GOMODCACHE", work.join("modcache"))
            .env("GOPROXY", format!("file://{},file://{}", work.join("proxy").display(), usual.join("cache/download").display()))
            .env("GOFLAGS", "-mod=mod -modcacherw")
            .env("GOSUMDB", "off");
        run(cmd, &format!("go {}", args.join(" ")))
    };
    assert_every_vector_passed(&user(&["run", ".", root().join("vectors").to_str().unwrap()]), major, "the module from the proxy");
    assert!(work.join("modcache/cache/download").join(module).join("@v").join(format!("{version}.zip")).is_file(), "downloaded from the proxy");
    // The protocol needs the standard library only; the readers bring their clients.
    let core = user(&["list", "-deps", module]);
    let foreign: Vec<&str> = core.lines().filter(|p| p.split('/').next().unwrap().contains('.') && !p.starts_with(module)).collect();
    assert!(foreign.is_empty(), "{module} imports {foreign:?}");
    let readers = user(&["list", "-deps", &format!("{module}/kafka"), &format!("{module}/jetstream")]);
    for client in ["github.com/IBM/sarama", "github.com/nats-io/nats.go/jetstream"] {
        assert!(readers.lines().any(|p| p == client), "{client} among the readers' packages:\n{readers}");
    }
    std::fs::remove_dir_all(&work).unwrap();
}

#[test]
fn the_java_artifact_installs_with_sources_and_javadoc_and_resolves_alone_into_an_empty_repository() {
    let version = java_version();
    let mut install = Command::new("mvn");
    install.args(["-B", "-q", "install", "-DskipTests"]).current_dir(consumers().join("java"));
    {
        let _maven = MAVEN.lock().unwrap_or_else(|e| e.into_inner());
        run(install, "mvn install in consumers/java");
    }
    let local = PathBuf::from(std::env::var("HOME").expect("HOME")).join(".m2/repository");
    let installed = local.join("dev/deltaship/deltaship-consumer").join(&version);
    let file = |suffix: &str| installed.join(format!("deltaship-consumer-{version}{suffix}"));
    let listing = |jar: PathBuf| run(Command::new("jar").arg("tf").arg(&jar), &format!("jar tf {}", jar.display()));
    assert!(listing(file("-sources.jar")).lines().any(|l| l == "dev/deltaship/consumer/Consumer.java"), "the sources jar");
    assert!(listing(file("-javadoc.jar")).lines().any(|l| l == "dev/deltaship/consumer/Consumer.html"), "the javadoc jar");
    let pom = std::fs::read_to_string(file(".pom")).unwrap();
    for metadata in ["<licenses>", "<developers>", "<scm>", "<url>"] {
        assert!(pom.contains(metadata), "the POM has {metadata} (Maven Central asks for it)");
    }

    // The user's project, resolved into an empty local repository. Maven Central is the
    // usual local repository, as a file repository (downloading into an empty one takes
    // minutes); the plugin that resolves comes there first, by an ordinary run.
    let work = scratch("maven");
    std::fs::copy(root().join("tests/packages/java/pom.xml"), work.join("pom.xml")).unwrap();
    let settings = format!(
        "<settings><mirrors><mirror><id>central-as-files</id><mirrorOf>*</mirrorOf><url>file://{}</url></mirror></mirrors></settings>",
        local.display()
    );
    std::fs::write(work.join("settings.xml"), settings).unwrap();
    let classpath = |extra: &[&str], out: &str| {
        let mut mvn = Command::new("mvn");
        mvn.args(["-B", "-q", "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath"])
            .arg(format!("-Ddeltaship.version={version}"))
            .arg(format!("-Dmdep.outputFile={out}"))
            .args(extra)
            .current_dir(&work);
        run(mvn, "mvn dependency:build-classpath");
        std::fs::read_to_string(work.join(out)).unwrap()
    };
    classpath(&[], "warm.txt");
    let empty = work.join("repository");
    let cp = classpath(&["-s", "settings.xml", &format!("-Dmaven.repo.local={}", empty.display())], "cp.txt");
    let jars: Vec<&str> = cp.trim().split(':').collect();
    assert!(jars.iter().all(|j| j.starts_with(empty.to_str().unwrap())), "from the empty repository: {jars:?}");
    let names: Vec<&str> = jars.iter().map(|j| j.rsplit('/').next().unwrap()).collect();
    assert!(names.contains(&format!("deltaship-consumer-{version}.jar").as_str()), "{names:?}");
    // The broker clients are optional (the user declares the one they read with, at their
    // version), and no logging binding comes along.
    let unwanted: Vec<&&str> = names.iter().filter(|n| !n.starts_with("deltaship-consumer-") && !n.starts_with("jackson-")).collect();
    assert!(unwanted.is_empty(), "the library brings {unwanted:?}");

    let mut check = Command::new("java");
    check.arg("-cp").arg(cp.trim()).arg(root().join("tests/packages/java/VectorsCheck.java")).arg(root().join("vectors")).current_dir(&work);
    let major = version.split('.').next().unwrap();
    assert_every_vector_passed(&run(check, "VectorsCheck.java"), major, "the artifact from the empty repository");
    std::fs::remove_dir_all(&work).unwrap();
}

/// `consumers/reference` writes pdoc's, `go doc`'s and javadoc's reference of the libraries,
/// and each shows the API that resumes from a snapshot.
#[test]
fn the_api_reference_of_each_library_is_generated_by_its_ecosystems_tool_and_shows_how_to_resume() {
    let out = scratch("reference");
    let started = std::time::Instant::now();
    {
        let _maven = MAVEN.lock().unwrap_or_else(|e| e.into_inner());
        run(Command::new(consumers().join("reference")).arg(&out), "consumers/reference");
    }
    eprintln!("consumers/reference: {:?}", started.elapsed());
    let read = |file: &str| std::fs::read_to_string(out.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let python = read("python/deltaship_consumer.html");
    for id in ["Consumer.resume", "Consumer.save", "Consumer.advance", "Consumer.position", "SNAPSHOT_FORMAT"] {
        assert!(python.contains(&format!("id=\"{id}\"")), "pdoc's page documents {id}");
    }
    let go = read("go/consumer.txt");
    for signature in [
        "func Resume(opts Options) (*Consumer, error)",
        "func (c *Consumer) Save() error",
        "func (c *Consumer) Advance(source string, partition int32, next int64) error",
        "func (c *Consumer) Position(source string, partition int32) (int64, bool)",
    ] {
        assert!(go.contains(signature), "go doc shows {signature}");
    }
    for reader in ["kafka", "jetstream"] {
        assert!(read(&format!("go/{reader}.txt")).contains("c.Position"), "go doc of {reader}: where reading starts");
    }
    let java = read("java/dev/deltaship/consumer/Consumer.html");
    for member in ["resume(java.nio.file.Path", "save()", "advance(java.lang.String", "position(java.lang.String"] {
        assert!(java.contains(member), "javadoc shows Consumer.{member}");
    }
    assert!(read("java/dev/deltaship/consumer/kafka/KafkaReader.html").contains("Consumer.html#position"), "javadoc of KafkaReader: where reading starts");
    let index = read("index.html");
    for link in ["python/deltaship_consumer.html", "go/consumer.txt", "java/index.html"] {
        assert!(index.contains(link) && out.join(link).is_file(), "index.html links {link}");
    }
    std::fs::remove_dir_all(&out).unwrap();
}
