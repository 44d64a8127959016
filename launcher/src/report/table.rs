//! A plain text table: a title, right-aligned columns, two spaces between them, each cell
//! escaped for a terminal ([`crate::output::escape`]).

use crate::output::escape;

/// Rows of cells under a title and a header line.
#[derive(Debug, Clone)]
pub struct Table {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with `title` and these column names.
    pub fn new(title: &str, header: &[&str]) -> Table {
        Table {
            title: title.to_string(),
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are blank, extra cells are dropped, and control characters
    /// are escaped (see [`escape`]).
    pub fn row(&mut self, cells: Vec<String>) {
        let mut cells: Vec<String> = cells.iter().map(|c| escape(c).into_owned()).collect();
        cells.resize(self.header.len(), String::new());
        self.rows.push(cells);
    }

    /// The table as text, ending with a newline.
    pub fn render(&self) -> String {
        let widths: Vec<usize> = (0..self.header.len())
            .map(|i| {
                self.rows
                    .iter()
                    .map(|r| r[i].chars().count())
                    .chain([self.header[i].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            let mut out = String::new();
            for (cell, w) in cells.iter().zip(&widths) {
                out.push_str("  ");
                out.push_str(&" ".repeat(w - cell.chars().count()));
                out.push_str(cell);
            }
            out.trim_end().to_string() + "\n"
        };
        let mut out = format!("{}\n", self.title);
        out.push_str(&line(&self.header));
        for r in &self.rows {
            out.push_str(&line(r));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns_right() {
        let mut t = Table::new("T", &["cpu", "sel"]);
        t.row(vec!["10".into(), "*".into()]);
        t.row(vec!["3".into()]);
        assert_eq!(t.render(), "T\n  cpu  sel\n   10    *\n    3\n");
    }

    #[test]
    fn control_characters_are_escaped_and_aligned_as_shown() {
        assert_eq!(
            escape("\x1b]0;pwned\x07\u{9b}2J"),
            "\\x1b]0;pwned\\x07\\x9b2J"
        );
        assert_eq!(escape("a\\b\tc\nd\x7f"), "a\\\\b\\x09c\\x0ad\\x7f");
        assert_eq!(escape("wörker"), "wörker");
        let mut t = Table::new("T", &["comm", "n"]);
        t.row(vec!["\x1b[2J".into(), "1".into()]);
        t.row(vec!["ab".into(), "2".into()]);
        assert_eq!(t.render(), "T\n     comm  n\n  \\x1b[2J  1\n       ab  2\n");
    }
}
