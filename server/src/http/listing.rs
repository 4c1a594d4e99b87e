//! Rendering a directory listing (`routes[].http.listing`) as HTML or JSON: name, size, mtime;
//! directories first, then files, by name; dotfiles hidden (as nginx `autoindex`); names
//! HTML-escaped and links percent-encoded; at most the entries the caller read (it keeps the
//! first `http.listing_max_entries` in this same order, `fs::listdir`, and says whether it cut
//! the rest). Pure.

use super::{date, uri};
use std::fmt::Write;

/// One directory entry as read from the volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: Vec<u8>,
    pub dir: bool,
    pub size: u64,
    /// Seconds since the epoch.
    pub mtime: i64,
}

/// Should the listing be JSON? `?format=json`, or an `Accept` preferring `application/json`.
pub fn wants_json(accept: Option<&str>, query: Option<&str>) -> bool {
    if let Some(q) = query {
        for kv in q.split('&') {
            match kv {
                "format=json" => return true,
                "format=html" => return false,
                _ => {}
            }
        }
    }
    accept.is_some_and(|a| {
        a.split(',')
            .next()
            .is_some_and(|first| first.trim().starts_with("application/json"))
    })
}

/// Entries to show, in display order (dotfiles dropped).
pub fn arrange(mut entries: Vec<Entry>) -> Vec<Entry> {
    entries.retain(|e| !e.name.starts_with(b"."));
    entries.sort_by(|a, b| b.dir.cmp(&a.dir).then_with(|| a.name.cmp(&b.name)));
    entries
}

fn escape_html(s: &str, out: &mut String) {
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
}

/// The HTML page for `path` (the decoded request path, ending in `/`).
pub fn html(path: &[u8], entries: &[Entry], truncated: bool) -> String {
    let mut out = String::with_capacity(256 + entries.len() * 128);
    let mut title = String::new();
    escape_html(&String::from_utf8_lossy(path), &mut title);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of {title}</title></head>\n<body><h1>Index of {title}</h1>\n<table>\n<tr><th>Name</th><th>Size</th><th>Modified</th></tr>\n"
    );
    if path != b"/" {
        out.push_str("<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n");
    }
    for e in entries {
        // Percent-encoded, then HTML-escaped: a browser decodes `&amp;` in an attribute, so a
        // bare `&` of the name (`x&lt;y.txt`) would link to another file (`x<y.txt`).
        let mut href = String::new();
        escape_html(&uri::encode_segment(&e.name), &mut href);
        let mut text = String::new();
        escape_html(&String::from_utf8_lossy(&e.name), &mut text);
        if e.dir {
            href.push('/');
            text.push('/');
        }
        let size = if e.dir {
            "-".to_string()
        } else {
            e.size.to_string()
        };
        let _ = writeln!(
            out,
            "<tr><td><a href=\"./{href}\">{text}</a></td><td>{size}</td><td>{}</td></tr>",
            date::format(e.mtime)
        );
    }
    out.push_str("</table>\n");
    if truncated {
        out.push_str("<p>Listing truncated.</p>\n");
    }
    out.push_str("</body></html>\n");
    out
}

/// The JSON document for `path`: `{"path", "entries": [{"name", "type", "size", "mtime"}],
/// "truncated"}`; `mtime` is seconds since the epoch, `size` is null for directories.
pub fn json(path: &[u8], entries: &[Entry], truncated: bool) -> String {
    let list: Vec<serde_json::Value> = entries
        .iter()
        .map(|e| {
            serde_json::json!({
                "name": String::from_utf8_lossy(&e.name),
                "type": if e.dir { "directory" } else { "file" },
                "size": if e.dir { None } else { Some(e.size) },
                "mtime": e.mtime,
            })
        })
        .collect();
    let doc = serde_json::json!({
        "path": String::from_utf8_lossy(path),
        "entries": list,
        "truncated": truncated,
    });
    let mut s = doc.to_string();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<Entry> {
        arrange(vec![
            Entry {
                name: b"b.mp4".to_vec(),
                dir: false,
                size: 10,
                mtime: 784_111_777,
            },
            Entry {
                name: b".secret".to_vec(),
                dir: false,
                size: 1,
                mtime: 0,
            },
            Entry {
                name: b"<script>&\".ts".to_vec(),
                dir: false,
                size: 2,
                mtime: 0,
            },
            Entry {
                name: b"season 1".to_vec(),
                dir: true,
                size: 4096,
                mtime: 0,
            },
            Entry {
                name: b"a.m3u8".to_vec(),
                dir: false,
                size: 3,
                mtime: 0,
            },
        ])
    }

    #[test]
    fn order_and_hidden_files() {
        let names: Vec<String> = entries()
            .iter()
            .map(|e| String::from_utf8_lossy(&e.name).into_owned())
            .collect();
        assert_eq!(names, vec!["season 1", "<script>&\".ts", "a.m3u8", "b.mp4"]);
    }

    #[test]
    fn html_is_escaped_and_links_encoded() {
        let page = html(b"/shows/<x>/", &entries(), true);
        assert!(
            page.contains("<title>Index of /shows/&lt;x&gt;/</title>"),
            "{page}"
        );
        assert!(
            page.contains("<a href=\"./season%201/\">season 1/</a>"),
            "{page}"
        );
        assert!(
            page.contains("<a href=\"./%3Cscript%3E&amp;%22.ts\">&lt;script&gt;&amp;&quot;.ts</a>"),
            "{page}"
        );
        assert!(
            page.contains("<td>10</td><td>Sun, 06 Nov 1994 08:49:37 GMT</td>"),
            "{page}"
        );
        assert!(!page.contains("secret"));
        assert!(!page.contains("<script>"));
        assert!(page.contains("truncated"));
        assert!(page.contains("href=\"../\""));
        assert!(!html(b"/", &[], false).contains("href=\"../\""));
    }

    #[test]
    fn json_document() {
        let doc: serde_json::Value =
            serde_json::from_str(&json(b"/shows/", &entries(), false)).unwrap();
        assert_eq!(doc["path"], "/shows/");
        assert_eq!(doc["truncated"], false);
        assert_eq!(doc["entries"][0]["name"], "season 1");
        assert_eq!(doc["entries"][0]["type"], "directory");
        assert!(doc["entries"][0]["size"].is_null());
        assert_eq!(doc["entries"][3]["name"], "b.mp4");
        assert_eq!(doc["entries"][3]["size"], 10);
        assert_eq!(doc["entries"][3]["mtime"], 784_111_777);
        assert_eq!(doc["entries"].as_array().unwrap().len(), 4);
    }

    #[test]
    fn format_choice() {
        assert!(wants_json(None, Some("format=json")));
        assert!(wants_json(Some("application/json"), None));
        assert!(!wants_json(Some("text/html,application/json"), None));
        assert!(!wants_json(Some("application/json"), Some("format=html")));
        assert!(!wants_json(None, None));
    }
}
