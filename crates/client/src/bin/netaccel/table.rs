//! Plain-text tables for the CLI's listings. Column widths come from the cells
//! themselves, so a long accelerator name or state widens its column instead of
//! pushing the rest of its row out of line with the header; numbers are aligned
//! right, text left, and no line ends in spaces.

/// How a column's cells sit in its width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// Renders `rows` under `headers`, two spaces between columns. Every row has one cell
/// per header.
pub fn render(headers: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|(h, _)| h.chars().count()).collect();
    for row in rows {
        assert_eq!(row.len(), headers.len(), "one cell per column");
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let header_cells: Vec<String> = headers.iter().map(|(h, _)| h.to_string()).collect();
    let mut out = String::new();
    for row in std::iter::once(&header_cells).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = widths[i] - cell.chars().count();
            match headers[i].1 {
                Align::Right => {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                }
                Align::Left => {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                }
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let text = render(
            &[
                ("slot", Align::Right),
                ("accelerator", Align::Left),
                ("queue", Align::Right),
                ("busy", Align::Right),
            ],
            &[
                vec!["0".into(), "echo".into(), "0".into(), "0.0%".into()],
                vec![
                    "12".into(),
                    "a_long_accelerator_name".into(),
                    "64".into(),
                    "100.0%".into(),
                ],
            ],
        );
        assert_eq!(
            text,
            "slot  accelerator              queue    busy\n\
             \x20  0  echo                         0    0.0%\n\
             \x20 12  a_long_accelerator_name     64  100.0%\n"
        );
    }

    #[test]
    fn an_empty_last_cell_leaves_no_trailing_spaces() {
        let text = render(
            &[("name", Align::Left), ("params", Align::Left)],
            &[vec!["echo".into(), String::new()]],
        );
        assert_eq!(text, "name  params\necho\n");
    }
}
