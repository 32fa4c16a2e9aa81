//! One model turn, as the answer decides it and before any API shapes it: what `render`
//! turns into bytes and `tokens` into token ids.

/// One tool call the model makes.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: String,
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

/// What the model says in one turn.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Turn {
    pub text: Option<String>,
    pub calls: Vec<Call>,
}
