//! A minimal server-sent-events parser over a complete recorded body: the gateway reads a
//! stream's events only after passing its bytes through untouched, to find the model's turn
//! and usage. Hand-written: about 30 lines, and the crates for it work on live streams.

/// One event: its `event:` name (if any) and its joined `data:` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub name: Option<String>,
    pub data: String,
}

/// Splits a whole SSE body into events.
#[must_use]
pub fn parse(body: &[u8]) -> Vec<Event> {
    let text = String::from_utf8_lossy(body);
    let mut events = Vec::new();
    let mut name = None;
    let mut data: Option<String> = None;
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            if let Some(d) = data.take() {
                events.push(Event {
                    name: name.take(),
                    data: d,
                });
            }
            name = None;
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => name = Some(value.to_owned()),
            "data" => match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => data = Some(value.to_owned()),
            },
            _ => {}
        }
    }
    if let Some(d) = data {
        events.push(Event { name, data: d });
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_named_and_multiline_events() {
        let body =
            b"event: a\ndata: {\"x\":1}\n\n: comment\ndata: l1\r\ndata: l2\r\n\r\ndata: [DONE]";
        let events = parse(body);
        assert_eq!(events.len(), 3);
        assert_eq!(events[0].name.as_deref(), Some("a"));
        assert_eq!(events[1].data, "l1\nl2");
        assert_eq!(events[2].data, "[DONE]");
    }
}
