//! `sandloop report` over a real run of the markdown-explorer main job
//! (small: the sample documents, three epochs), rendered in headless
//! Chromium: no console errors, charts drawn, a screenshot that is not
//! blank. Chromium is required (`apt-get install -y chromium`);
//! `SANDLOOP_SKIP_BROWSER=1` skips the browser half, printing SKIPPED.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;
use sandloop::report::RunReport;
use sandloop::report::html::RUN_SECTIONS;

/// The markdown-explorer main job, small; returns the run's stdout.
fn main_job(out: &Path) -> String {
    let output = run_markdown_explorer(out, &["--epochs", "3", "--workers", "2"], &[]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    stdout(&output)
}

/// The Chromium binary: `$SANDLOOP_CHROMIUM`, else `chromium` or
/// `chromium-browser` on PATH.
fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SANDLOOP_CHROMIUM") {
        return Some(path.into());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// The browser for a test's Chromium half; `None` (printing SKIPPED) when
/// `SANDLOOP_SKIP_BROWSER=1`. Panics when Chromium is not installed.
fn browser() -> Option<PathBuf> {
    if std::env::var_os("SANDLOOP_SKIP_BROWSER").is_some_and(|v| v == "1") {
        println!("SKIPPED: the report in headless Chromium (SANDLOOP_SKIP_BROWSER=1)");
        return None;
    }
    let Some(browser) = chromium() else {
        panic!(
            "chromium is not installed: install it with `apt-get install -y chromium` \
             (or set SANDLOOP_CHROMIUM=PATH), or set SANDLOOP_SKIP_BROWSER=1 to skip this check"
        );
    };
    Some(browser)
}

/// Run Chromium headless on `page`, in its own process group, killed
/// (the whole group) after `limit`. Returns its stderr.
fn headless(browser: &Path, page: &Path, args: &[String], limit: Duration) -> String {
    let profile = tempfile::tempdir().unwrap();
    let log = profile.path().join("stderr.log");
    let mut child = Command::new(browser)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!(
            "--user-data-dir={}",
            profile.path().join("profile").display()
        ))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|error| panic!("cannot start {}: {error}", browser.display()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            // SAFETY: signals the process group this test started.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            panic!("chromium did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Helpers Chromium left behind go with its group.
    // SAFETY: as above; the group may already be gone.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "chromium failed ({status}): {stderr}");
    stderr
}

/// Decode a PNG screenshot: (width, height, RGBA pixels).
fn decode_png(path: &Path) -> (u32, u32, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buffer = vec![
        0;
        reader
            .output_buffer_size()
            .expect("a screenshot fits in memory")
    ];
    let info = reader.next_frame(&mut buffer).unwrap();
    buffer.truncate(info.buffer_size());
    let rgba: Vec<u8> = match info.color_type {
        png::ColorType::Rgba => buffer,
        png::ColorType::Rgb => buffer
            .chunks(3)
            .flat_map(|p| [p[0], p[1], p[2], 255])
            .collect(),
        other => panic!("unexpected screenshot colour type {other:?}"),
    };
    (info.width, info.height, rgba)
}

#[test]
fn the_main_jobs_report_renders_in_a_browser_with_its_charts_drawn() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("markdown");
    let printed = main_job(&out);
    let last = printed.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        format!("  report     sandloop report {}", s(&out)),
        "{printed}"
    );

    let report = run(&["report", s(&out)]);
    assert_eq!(code(&report), 0, "{}", stderr(&report));
    let page_path = out.join("report.html");
    assert!(
        stdout(&report).contains(s(&page_path)),
        "{}",
        stdout(&report)
    );
    let page = std::fs::read_to_string(&page_path).unwrap();
    assert!(page.len() < 2_000_000, "{} bytes", page.len());
    // Every section is drawn but the one this adapter cannot fill, which
    // the page names once, with why.
    for heading in RUN_SECTIONS {
        let drawn = page.contains(&format!(">{heading}</h2>"));
        if heading == "Counterfactual fixes" {
            assert!(!drawn, "the adapter exports no counterfactual interface");
        } else {
            assert!(drawn, "{heading} missing");
        }
    }
    assert_eq!(
        page.matches("Not drawn, because this adapter does not export what fills them: Counterfactual fixes (no counterfactual interface).")
            .count(),
        1
    );
    // Short runs are timed in seconds, never "0 min".
    assert!(
        page.contains(" s elapsed on 2 workers"),
        "elapsed not in seconds"
    );
    assert!(page.contains("compute seconds per epoch"));
    // The novelty curve is drawn against records, and against epochs
    // from two epochs on.
    assert!(page.contains("cumulative novel value per record"));
    let epochs = json_file(&out.join("summary.json"))["epoch_count"]
        .as_u64()
        .unwrap();
    assert_eq!(
        page.contains("cumulative novel value per epoch"),
        epochs > 1,
        "{epochs} epochs"
    );
    // The sample documents' families and the run's adapter are shown.
    assert!(page.contains("readme"), "no family readme");
    let manifest = json_file(&out.join("manifest.json"));
    assert!(page.contains(manifest["adapter"]["sha256"].as_str().unwrap()));
    // Charts: drawn lines and bars, not empty paths.
    assert!(page.matches("<svg").count() >= 6);
    let drawn = |class: &str| {
        page.matches(&format!("<path class=\"{class}\" d=\"M"))
            .count()
    };
    assert!(drawn("series") >= 3, "{} lines", drawn("series"));
    assert!(drawn("bar") >= 5, "{} bars", drawn("bar"));
    assert!(!page.contains("d=\"\""), "an empty path");

    // The same run twice is a slip, refused.
    let twice = run(&["report", s(&out), s(&out)]);
    assert_eq!(code(&twice), 2, "{}", stderr(&twice));
    assert!(
        stderr(&twice).contains("are the same run directory"),
        "{}",
        stderr(&twice)
    );
    // Two runs compared as arms: the run and a copy of it elsewhere, with
    // the same arm key and directory name, told apart by their paths.
    let copy = dir.path().join("elsewhere").join("markdown");
    copy_dir(&out, &copy);
    let arms_page = dir.path().join("arms.html");
    let arms = run(&["report", s(&out), s(&copy), "--out", s(&arms_page)]);
    assert_eq!(code(&arms), 0, "{}", stderr(&arms));
    let arms_html = std::fs::read_to_string(&arms_page).unwrap();
    assert!(arms_html.contains("2 arms compared"));
    let tmp_name = dir.path().file_name().unwrap().to_string_lossy();
    assert!(
        arms_html.contains(&format!("main ({tmp_name}/markdown)")),
        "{arms_html}"
    );
    assert!(arms_html.contains("main (elsewhere/markdown)"));
    assert!(arms_html.contains("every arm ran with the same options"));
    // Two charts against records, two more against epochs from two on.
    let charts = if epochs > 1 { 4 } else { 2 };
    assert_eq!(
        arms_html.matches("<path class=\"series\" d=\"M").count(),
        2 * charts
    );
    assert_eq!(
        arms_html.matches("stroke-dasharray=\"7 3\"").count(),
        2 * charts,
        "the second arm's lines are dashed (its line and legend in each chart)"
    );

    let Some(browser) = browser() else { return };
    let shot = dir.path().join("report.png");
    let log = headless(
        &browser,
        &page_path,
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1200,3000".to_owned(),
        ],
        Duration::from_secs(120),
    );
    let console: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("CONSOLE") || line.contains("Refused to"))
        .collect();
    assert!(console.is_empty(), "console messages: {console:#?}");

    let (width, height, rgba) = decode_png(&shot);
    assert_eq!((width, height), (1200, 3000));
    let pixels = rgba.chunks(4);
    let ink = pixels
        .clone()
        .filter(|p| p[0] < 235 || p[1] < 235 || p[2] < 235)
        .count();
    // Chart colours (saturated: the channels far apart), not just text.
    let colour = pixels
        .filter(|p| {
            let (max, min) = (p[0].max(p[1]).max(p[2]), p[0].min(p[1]).min(p[2]));
            max - min > 80
        })
        .count();
    let total = (width * height) as usize;
    assert!(
        ink * 100 > total * 2,
        "a blank screenshot: {ink} of {total} pixels inked"
    );
    assert!(colour > 2_000, "no chart drawn: {colour} coloured pixels");

    // The arms page in the browser: both arms' lines show although their
    // figures are equal (the second is dashed, its points are squares).
    let arms_shot = dir.path().join("arms.png");
    headless(
        &browser,
        &arms_page,
        &[
            format!("--screenshot={}", arms_shot.display()),
            "--window-size=1400,1600".to_owned(),
        ],
        Duration::from_secs(120),
    );
    let (_, _, rgba) = decode_png(&arms_shot);
    let near = |want: [u8; 3]| {
        rgba.chunks(4)
            .filter(|p| (0..3).all(|i| p[i].abs_diff(want[i]) <= 24))
            .count()
    };
    let (first, second) = (near([0x00, 0x72, 0xb2]), near([0xe6, 0x9f, 0x00]));
    assert!(
        first > 300 && second > 300,
        "both arms drawn: {first} and {second} pixels of their colours"
    );
}

#[test]
fn a_report_of_a_missing_run_is_bad_input_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing");
    let output = run(&["report", s(&missing)]);
    assert_exit(
        &output,
        2,
        &[&format!("{}", missing.join("manifest.json").display())],
    );
    let several = run(&["report", s(&missing), s(&missing)]);
    assert_exit(&several, 2, &["manifest.json"]);
}

/// A run without `summary.json` is drawn from what it left, marked
/// partial: still running while a process holds its lock (`--watch`
/// redraws it, reloading, until the summary appears), stopped when killed
/// (a torn last record is left out), failed with `failure.json`'s reason.
#[test]
fn partial_runs_are_drawn_from_what_they_left_and_watched_until_they_finish() {
    let dir = tempfile::tempdir().unwrap();
    let items = write_items(
        dir.path(),
        "slow.jsonl",
        &[
            serde_json::json!({"item_id": "fast", "family": "f", "attack": "none"}),
            serde_json::json!({"item_id": "slow-1", "family": "f", "attack": "infinite_loop"}),
            serde_json::json!({"item_id": "slow-2", "family": "g", "attack": "infinite_loop"}),
        ],
    );
    let out = dir.path().join("run");
    let mut running = sandloop()
        .args(run_args(
            sandloop_tests::HOSTILE_ADAPTER,
            &items,
            &out,
            &["--workers", "1", "--call-timeout", "2"],
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !out.join("manifest.json").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the run never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let page_path = dir.path().join("live.html");
    let live = run(&["report", s(&out), "--out", s(&page_path)]);
    assert_eq!(code(&live), 0, "{}", stderr(&live));
    assert!(stdout(&live).contains("1 partial"), "{}", stdout(&live));
    let page = std::fs::read_to_string(&page_path).unwrap();
    assert!(
        page.contains("A partial run: partial: still running"),
        "{page}"
    );
    assert!(
        page.contains("<footer>Drawn at 20"),
        "the page says when it was drawn"
    );

    // A second run into it, fresh or resumed, is told the run is going,
    // not advised to resume it.
    for extra in [&[][..], &["--resume"][..]] {
        let args = run_args(sandloop_tests::HOSTILE_ADAPTER, &items, &out, extra);
        let second = run(&args);
        assert_eq!(code(&second), 2, "{extra:?}: {}", stderr(&second));
        let said = stderr(&second);
        assert!(
            said.contains("is in use by another sandloop run") && !said.contains("--resume"),
            "{extra:?}: {said}"
        );
    }

    // --watch draws it again until the run has its summary, then stops.
    let watched = dir.path().join("watched.html");
    let watch = sandloop()
        .args(["report", s(&out), "--out", s(&watched), "--watch", "1"])
        .output()
        .unwrap();
    assert_eq!(code(&watch), 0, "{}", stderr(&watch));
    assert!(running.wait().unwrap().success());
    let rounds = stdout(&watch).lines().count();
    assert!(
        rounds >= 2,
        "drawn while running and once finished: {}",
        stdout(&watch)
    );
    assert!(!stdout(&watch).lines().last().unwrap().contains("partial"));
    let page = std::fs::read_to_string(&watched).unwrap();
    assert!(
        !page.contains("A partial run"),
        "the last page is the finished run's"
    );
    assert!(
        !page.contains("http-equiv=\"refresh\""),
        "and stops reloading"
    );

    // Killed before its summary, with a torn last record: stopped.
    let finished = json_file(&out.join("summary.json"));
    let (records_total, epochs_total) = (
        finished["record_count"].clone(),
        finished["epoch_count"].clone(),
    );
    std::fs::remove_file(out.join("summary.json")).unwrap();
    let mut records = std::fs::OpenOptions::new()
        .append(true)
        .open(out.join("records.jsonl"))
        .unwrap();
    std::io::Write::write_all(&mut records, b"{\"item_id\": \"torn").unwrap();
    let stopped = run(&["report", s(&out), "--out", s(&page_path)]);
    assert_eq!(code(&stopped), 0, "{}", stderr(&stopped));
    let page = std::fs::read_to_string(&page_path).unwrap();
    assert!(
        page.contains("partial: stopped before its summary"),
        "{page}"
    );
    // A stopped run cannot change: --watch draws it once and ends.
    let once = run(&["report", s(&out), "--out", s(&page_path), "--watch", "1"]);
    assert_eq!(code(&once), 0, "{}", stderr(&once));
    assert_eq!(stdout(&once).lines().count(), 1, "{}", stdout(&once));
    assert!(
        stderr(&once).contains("no run is still going"),
        "{}",
        stderr(&once)
    );
    // In a browser, the partial banner is drawn above the figures.
    if let Some(browser) = browser() {
        let shot = dir.path().join("partial.png");
        headless(
            &browser,
            &page_path,
            &[
                format!("--screenshot={}", shot.display()),
                "--window-size=1200,300".to_owned(),
            ],
            Duration::from_secs(120),
        );
        let (_, _, rgba) = decode_png(&shot);
        let banner = rgba
            .chunks(4)
            .filter(|p| p[0] == 0xff && p[1] == 0xf4 && p[2] == 0xd6)
            .count();
        assert!(
            banner > 20_000,
            "the partial banner is not drawn: {banner} pixels"
        );
    }
    assert!(
        page.contains(&format!(
            ": {records_total} records in {epochs_total} epoch"
        )),
        "the torn line is left out: {page}"
    );

    // Failed: failure.json says why.
    std::fs::write(
        out.join("failure.json"),
        serde_json::json!({"schema_version": "sandloop_run_failure_v0", "error": "disk full",
            "exit_code": 1, "resume": "continue with --resume"})
        .to_string(),
    )
    .unwrap();
    let failed = run(&["report", s(&out), "--out", s(&page_path)]);
    assert_eq!(code(&failed), 0, "{}", stderr(&failed));
    let page = std::fs::read_to_string(&page_path).unwrap();
    assert!(page.contains("partial: failed (disk full)"), "{page}");
}

/// The figures of a report that do not depend on timing: values, counts,
/// classes and the curve's values, as text.
fn untimed_figures(report: &RunReport) -> String {
    let curve: Vec<_> = report
        .novelty
        .points
        .iter()
        .map(|p| {
            (
                p.epoch,
                p.novel_value_cum,
                p.raw_value_cum,
                p.coverage_cum,
                p.variant_records_cum,
                p.variants_admitted,
            )
        })
        .collect();
    let errors: Vec<_> = report.errors.iter().map(|c| (&c.class, c.count)).collect();
    let points = report.replay.points.as_ref().map(|p| {
        (
            p.total,
            p.durable,
            &p.by_fidelity_lifecycle,
            p.quarantines.len(),
        )
    });
    format!(
        "curve {curve:?}\nfamilies {:?}\nyield {:?}\nerrors {errors:?}\npoints {points:?}\nchildren {:?}",
        report.families, report.spec_yield, report.replay.children
    )
}

#[test]
fn the_report_of_a_resumed_run_shows_the_figures_of_an_uninterrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    // One seed document per epoch, so the run spans its epochs.
    let page = [("MARKDOWN_PAGE_SIZE", "1")];
    let stepped = dir.path().join("stepped");
    let first = run_markdown_explorer(&stepped, &["--epochs", "1"], &page);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let resumed = run_markdown_explorer(&stepped, &["--epochs", "3", "--resume"], &page);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    let straight = dir.path().join("straight");
    let whole = run_markdown_explorer(&straight, &["--epochs", "3"], &page);
    assert_eq!(code(&whole), 0, "{}", stderr(&whole));

    let stepped = RunReport::load(&stepped).unwrap();
    let straight = RunReport::load(&straight).unwrap();
    assert_eq!(stepped.novelty.points.len(), 3);
    assert!(!stepped.families.is_empty() && !stepped.spec_yield.is_empty());
    assert_eq!(untimed_figures(&stepped), untimed_figures(&straight));
    assert_eq!(stepped.manifest.invocations.len(), 2);
}
