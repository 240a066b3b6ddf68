//! `target/bench/ratios.svg`: a bar chart of the figures that compare the hypervisor with the
//! same guest directly on QEMU (hypervisor / no hypervisor), with each figure's target.
//! Plain SVG 1.1 written as text: no crate, viewable in any browser.

/// What a ratio has to be.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// Costs (instructions): the hypervisor's run may take at most this many times as long.
    AtMost(f64),
    /// Throughput: the hypervisor's run must reach at least this fraction.
    AtLeast(f64),
}

impl Target {
    pub fn value(self) -> f64 {
        match self {
            Target::AtMost(v) | Target::AtLeast(v) => v,
        }
    }

    pub fn met(self, ratio: f64) -> bool {
        match self {
            Target::AtMost(v) => ratio <= v,
            Target::AtLeast(v) => ratio >= v,
        }
    }

    fn label(self) -> String {
        match self {
            Target::AtMost(v) => format!("≤ {v}"),
            Target::AtLeast(v) => format!("≥ {v}"),
        }
    }
}

/// One figure: its name and hypervisor / no hypervisor.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    pub label: String,
    pub ratio: f64,
    pub target: Option<Target>,
}

const BAR_WIDTH: f64 = 56.0;
const SLOT: f64 = 120.0;
const LEFT: f64 = 60.0;
const TOP: f64 = 50.0;
const PLOT_HEIGHT: f64 = 300.0;
const BOTTOM: f64 = 70.0;
const MIN_WIDTH: f64 = 520.0;

/// `&`, `<`, `>` and `"` as XML entities.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The chart: one `<rect class="bar ...">` per figure, green if it meets its target, red if
/// not, grey without one; a dashed `<line class="target">` across a bar's slot at its
/// target; a `<line class="parity">` at 1 (as fast as without the hypervisor).
pub fn svg(title: &str, bars: &[Bar]) -> String {
    let top_value = bars
        .iter()
        .flat_map(|b| [b.ratio, b.target.map_or(0.0, Target::value)])
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max)
        * 1.15;
    // A round step for the axis: 0.1, 0.2, 0.25, 0.5 or 1 times a power of ten, 4 to 10 ticks.
    let magnitude = 10f64.powf((top_value / 5.0).log10().floor());
    let step =
        [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * magnitude).find(|s| top_value / s <= 10.0).unwrap_or(magnitude);
    let top_value = (top_value / step).ceil() * step;
    let y = |v: f64| TOP + PLOT_HEIGHT * (1.0 - v.clamp(0.0, top_value) / top_value);
    // Wide enough for the title and the legend below the bars.
    let width = (LEFT + SLOT * bars.len().max(1) as f64 + 20.0).max(MIN_WIDTH);
    let height = TOP + PLOT_HEIGHT + BOTTOM;

    let mut s = String::new();
    s.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    s.push_str(&format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"sans-serif\" font-size=\"12\">\n"
    ));
    s.push_str(&format!("<title>{}</title>\n", escape(title)));
    s.push_str(
        "<style>.met{fill:#4a9d5b}.missed{fill:#c8553d}.none{fill:#8a8f98}\
         .target{stroke:#222;stroke-width:2;stroke-dasharray:6 3}.parity{stroke:#555;stroke-width:1}\
         .grid{stroke:#ddd;stroke-width:1}</style>\n",
    );
    s.push_str(&format!("<rect width=\"{width:.0}\" height=\"{height:.0}\" fill=\"white\"/>\n"));
    s.push_str(&format!("<text x=\"{:.1}\" y=\"24\" font-size=\"15\">{}</text>\n", LEFT, escape(title)));

    // Axis with its grid.
    let ticks = (top_value / step).round() as usize;
    for i in 0..=ticks {
        let v = step * i as f64;
        let yv = y(v);
        s.push_str(&format!(
            "<line class=\"grid\" x1=\"{LEFT:.1}\" y1=\"{yv:.1}\" x2=\"{:.1}\" y2=\"{yv:.1}\"/>\n",
            width - 20.0
        ));
        s.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            LEFT - 6.0,
            yv + 4.0,
            trim_number(v)
        ));
    }
    s.push_str(&format!(
        "<line class=\"parity\" x1=\"{LEFT:.1}\" y1=\"{0:.1}\" x2=\"{1:.1}\" y2=\"{0:.1}\"/>\n",
        y(1.0),
        width - 20.0
    ));

    for (i, bar) in bars.iter().enumerate() {
        let slot = LEFT + SLOT * i as f64;
        let x = slot + (SLOT - BAR_WIDTH) / 2.0;
        let ratio = if bar.ratio.is_finite() { bar.ratio.max(0.0) } else { 0.0 };
        let class = match bar.target {
            Some(t) if t.met(ratio) => "met",
            Some(_) => "missed",
            None => "none",
        };
        let top = y(ratio);
        s.push_str(&format!(
            "<rect class=\"bar {class}\" x=\"{x:.1}\" y=\"{top:.1}\" width=\"{BAR_WIDTH:.1}\" height=\"{:.1}\">\
             <title>{}: {ratio:.3}</title></rect>\n",
            y(0.0) - top,
            escape(&bar.label)
        ));
        s.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{ratio:.3}</text>\n",
            x + BAR_WIDTH / 2.0,
            top - 5.0
        ));
        if let Some(t) = bar.target {
            let yt = y(t.value());
            s.push_str(&format!(
                "<line class=\"target\" x1=\"{:.1}\" y1=\"{yt:.1}\" x2=\"{:.1}\" y2=\"{yt:.1}\"/>\n",
                slot + 8.0,
                slot + SLOT - 8.0
            ));
            s.push_str(&format!(
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">target {}</text>\n",
                x + BAR_WIDTH / 2.0,
                height - BOTTOM + 34.0,
                escape(&t.label())
            ));
        }
        s.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            x + BAR_WIDTH / 2.0,
            height - BOTTOM + 18.0,
            escape(&bar.label)
        ));
    }
    s.push_str(&format!(
        "<text x=\"{LEFT:.1}\" y=\"{:.1}\" font-size=\"10\">hypervisor / no hypervisor; \
         dashed: target; grey line: 1 (the same as without the hypervisor)</text>\n",
        height - 8.0
    ));
    s.push_str("</svg>\n");
    s
}

fn trim_number(v: f64) -> String {
    let text = format!("{v:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks that every tag is closed in order, the text holds no raw `<` and every `&`
    /// starts an entity; returns the start tags seen, in order.
    fn well_formed(xml: &str) -> Result<Vec<String>, String> {
        let mut open: Vec<String> = Vec::new();
        let mut starts = Vec::new();
        let mut rest = xml;
        while let Some(lt) = rest.find('<') {
            let text = &rest[..lt];
            for (i, _) in text.match_indices('&') {
                let entity = &text[i..];
                if !["&amp;", "&lt;", "&gt;", "&quot;"].iter().any(|e| entity.starts_with(e)) {
                    return Err(format!("a bare & in {text:?}"));
                }
            }
            let gt = rest[lt..].find('>').ok_or("a tag that does not end")? + lt;
            let tag = &rest[lt + 1..gt];
            if tag.contains('<') {
                return Err(format!("a < inside the tag {tag:?}"));
            }
            if let Some(name) = tag.strip_prefix('/') {
                match open.pop() {
                    Some(o) if o == name => {}
                    other => return Err(format!("</{name}> closes {other:?}")),
                }
            } else if !tag.starts_with('?') {
                let name = tag.split_whitespace().next().unwrap_or("").trim_end_matches('/').to_string();
                if !tag.matches('"').count().is_multiple_of(2) {
                    return Err(format!("unbalanced quotes in {tag:?}"));
                }
                starts.push(tag.to_string());
                if !tag.ends_with('/') {
                    open.push(name);
                }
            }
            rest = &rest[gt + 1..];
        }
        if !open.is_empty() {
            return Err(format!("never closed: {open:?}"));
        }
        Ok(starts)
    }

    fn attribute(tag: &str, name: &str) -> f64 {
        let at = tag.find(&format!(" {name}=\"")).unwrap_or_else(|| panic!("no {name} in {tag}")) + name.len() + 3;
        tag[at..].split('"').next().unwrap().parse().unwrap()
    }

    #[test]
    fn one_bar_per_figure_with_its_target_in_well_formed_svg() {
        let bars = [
            Bar { label: "linux boot".into(), ratio: 1.05, target: Some(Target::AtMost(1.05)) },
            Bar { label: "sha256sum".into(), ratio: 2.1, target: Some(Target::AtMost(1.01)) },
            Bar { label: "disk <read> & write".into(), ratio: 0.5, target: Some(Target::AtLeast(0.8)) },
            Bar { label: "no target".into(), ratio: 1.0, target: None },
        ];
        let svg = svg("ratios & more", &bars);
        assert!(svg.starts_with("<?xml version=\"1.0\""));
        assert!(svg.ends_with("</svg>\n"));
        let tags = well_formed(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
        assert!(tags[0].starts_with("svg xmlns=\"http://www.w3.org/2000/svg\""));

        let rects: Vec<&String> = tags.iter().filter(|t| t.starts_with("rect class=\"bar ")).collect();
        assert_eq!(rects.len(), bars.len(), "one bar per figure");
        let classes: Vec<&str> = rects.iter().map(|t| t.split('"').nth(1).unwrap()).collect();
        assert_eq!(classes, ["bar met", "bar missed", "bar missed", "bar none"]);
        assert_eq!(tags.iter().filter(|t| t.starts_with("line class=\"target\"")).count(), 3, "targets where given");
        assert!(svg.contains("disk &lt;read&gt; &amp; write"));

        // Heights are proportional to the ratios, on one baseline.
        let height = |i: usize| attribute(rects[i], "height");
        let bottom = |i: usize| attribute(rects[i], "y") + height(i);
        assert!((height(1) / height(3) - 2.1).abs() < 0.01, "{} {}", height(1), height(3));
        assert!((height(2) / height(3) - 0.5).abs() < 0.01);
        assert!((0..4).all(|i| (bottom(i) - bottom(0)).abs() < 0.2));
        // The first bar's top is at its target's line; the tallest bar fits in the plot.
        let target_y: Vec<f64> =
            tags.iter().filter(|t| t.starts_with("line class=\"target\"")).map(|t| attribute(t, "y1")).collect();
        assert!((target_y[0] - attribute(rects[0], "y")).abs() < 0.2);
        assert!(attribute(rects[1], "y") >= TOP);
    }

    #[test]
    fn an_empty_chart_is_still_an_svg() {
        let svg = svg("nothing", &[]);
        let tags = well_formed(&svg).unwrap();
        assert_eq!(tags.iter().filter(|t| t.starts_with("rect class=\"bar")).count(), 0);
    }
}
