#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
// SCRATCH: delete before handing back.
use std::path::{Path, PathBuf};
use tokenizers::Tokenizer;

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() { walk(&p, out) } else { out.push(p) }
    }
}

#[test]
fn dump() {
    let Some(src) = std::env::var_os("SCRATCH_DIR") else { return };
    let dst = PathBuf::from(std::env::var_os("SCRATCH_OUT").unwrap());
    let tok = Tokenizer::from_file("/work/shared/data/tokenizers/deepseek-v4/tokenizer.json").unwrap();
    let src = PathBuf::from(src);
    let mut files = Vec::new();
    walk(&src, &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let enc = tok.encode(text.as_str(), false).unwrap();
        let mut lines = String::new();
        for (s, e) in enc.get_offsets() {
            let piece = text.get(*s..*e).unwrap_or("\u{FFFD}");
            lines.push_str(&serde_json::to_string(piece).unwrap());
            lines.push('\n');
        }
        let rel = f.strip_prefix(&src).unwrap();
        let out = dst.join(rel);
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        std::fs::write(out.with_extension("tok"), lines).unwrap();
    }
}
