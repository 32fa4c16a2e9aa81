//! The one page of the dashboard and the report: `assets/page.html` with its style and script
//! put in, and, for the report, the documents inlined as JSON (`<` escaped, so no text of the
//! run can end the block). The page loads nothing: no network, no other file.

use std::fmt::Write as _;

use crate::{RolloutView, RunView};

const HTML: &str = include_str!("../assets/page.html");
const STYLE: &str = include_str!("../assets/page.css");
const SCRIPT: &str = include_str!("../assets/page.js");

/// Which page: the report carries its documents; the live one fetches them from the run's
/// endpoint with the token it is given.
#[derive(Debug, Clone, Copy)]
pub enum Mode<'a> {
    Report {
        run: &'a RunView,
        rollouts: &'a [RolloutView],
    },
    Live,
}

/// The page, titled `title`.
#[must_use]
pub fn render(title: &str, mode: Mode<'_>) -> String {
    let mut data = String::new();
    let name = match mode {
        Mode::Report { run, rollouts } => {
            block(&mut data, "rp-view", run);
            for r in rollouts {
                block(&mut data, &format!("rp-detail-{}", r.id), r);
            }
            "report"
        }
        Mode::Live => "live",
    };
    fill(
        HTML,
        &[
            ("RP_TITLE", &escape(title)),
            ("RP_MODE", name),
            ("/*RP_STYLE*/", STYLE),
            ("<!--RP_DATA-->", &data),
            ("/*RP_SCRIPT*/", SCRIPT),
        ],
    )
}

/// `template` with each marker replaced, in one pass: nothing put in is read for markers
/// again, so no text of the run can pull an asset into a place it was not meant for.
fn fill(template: &str, parts: &[(&str, &str)]) -> String {
    let mut out =
        String::with_capacity(template.len() + parts.iter().map(|p| p.1.len()).sum::<usize>());
    let mut rest = template;
    loop {
        let next = parts
            .iter()
            .filter_map(|(marker, with)| rest.find(marker).map(|at| (at, *marker, *with)))
            .min_by_key(|(at, _, _)| *at);
        let Some((at, marker, with)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..at]);
        out.push_str(with);
        rest = &rest[at + marker.len()..];
    }
}

/// One JSON document in a `<script type="application/json">` block.
fn block(out: &mut String, id: &str, doc: &impl serde::Serialize) {
    let json = serde_json::to_string(doc).unwrap_or_else(|_| "null".to_owned());
    let _ = writeln!(
        out,
        "<script type=\"application/json\" id=\"{}\">{}</script>",
        escape(id),
        json.replace('<', "\\u003c")
    );
}

/// Text for HTML.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::{RolloutLine, Summary, VIEW_VERSION};

    #[test]
    fn the_run_s_text_is_never_read_as_markup_or_as_a_marker() {
        let hostile = "</script><script>alert(1)</script> /*RP_SCRIPT*/ <!--RP_DATA--> RP_MODE";
        let run = RunView {
            v: VIEW_VERSION,
            title: hostile.to_owned(),
            live: false,
            generated_ms: 0,
            summary: Summary::default(),
            groups: None,
            events: vec![serde_json::json!({"kind": "exec", "argv": [hostile]})],
            rollouts: vec![RolloutLine {
                id: "r".into(),
                task: hostile.into(),
                state: "verified".into(),
                attempt: 0,
                reward: None,
                error: Some(hostile.into()),
                infra_class: None,
                group: None,
                started_ms: None,
                ended_ms: None,
                calls: 0,
                tokens: 0,
                launches: Vec::new(),
            }],
        };
        let page = render(
            hostile,
            Mode::Report {
                run: &run,
                rollouts: &[],
            },
        );
        // The script is put in once, where the template has it.
        assert_eq!(page.matches(SCRIPT).count(), 1);
        // Only the page's own script blocks open and close.
        assert_eq!(
            page.matches("<script").count(),
            2,
            "the data block and the script"
        );
        assert_eq!(page.matches("</script>").count(), 2);
        assert!(
            page.contains("<body data-mode=\"report\""),
            "the mode is the template's"
        );
        // The data block is the document, whole.
        let open = "<script type=\"application/json\" id=\"rp-view\">";
        let start = page.find(open).unwrap() + open.len();
        let len = page[start..].find("</script>").unwrap();
        let back: serde_json::Value = serde_json::from_str(&page[start..start + len]).unwrap();
        assert_eq!(back["title"], hostile);
        assert_eq!(back["rollouts"][0]["error"], hostile);
    }

    #[test]
    fn the_live_page_holds_no_data() {
        let page = render("rollpoint run", Mode::Live);
        assert!(!page.contains("<script type=\"application/json\""));
        assert!(page.contains("<body data-mode=\"live\""));
        for loads in ["<link", " src=", "url(", "@import"] {
            assert!(!page.contains(loads), "the page loads nothing ({loads})");
        }
    }
}
