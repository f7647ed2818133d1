//! AST → LQL text. Keywords upper case, strings double-quoted with escapes, clauses in
//! canonical order; the output parses back to an equal AST (ignoring spans).

use crate::ast::*;
use std::fmt::{self, Display, Formatter, Write};

/// Prints a script: each statement followed by `;` and a newline.
pub fn print_script(statements: &[Statement]) -> String {
    let mut out = String::new();
    for s in statements {
        let _ = writeln!(out, "{s};");
    }
    out
}

/// Quotes a string as an LQL double-quoted literal.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

struct Q<'a>(&'a str);
impl Display for Q<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(&quote(self.0))
    }
}

impl Display for Span {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

impl Display for LayerSpec {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            LayerSpec::All => f.write_str("ALL"),
            LayerSpec::Range { first, last } if first == last => write!(f, "{first}"),
            LayerSpec::Range { first, last } => write!(f, "{first}-{last}"),
        }
    }
}

impl Display for Value {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(i) => write!(f, "{i}"),
            // Debug keeps a '.' or an exponent, so the text reads back as a float.
            Value::Float(x) => write!(f, "{x:?}"),
            Value::String(s) => f.write_str(&quote(s)),
            Value::Bool(true) => f.write_str("TRUE"),
            Value::Bool(false) => f.write_str("FALSE"),
            Value::Null => f.write_str("NULL"),
        }
    }
}

fn float(x: f64) -> String {
    format!("{x:?}")
}

impl Display for WalkMode {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WalkMode::Embedding => "EMBEDDING",
            WalkMode::Residual => "RESIDUAL",
        })
    }
}
impl Display for Detail {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Detail::Brief => "BRIEF",
            Detail::Verbose => "VERBOSE",
            Detail::Raw => "RAW",
        })
    }
}
impl Display for Table {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
impl Display for PatchComponent {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            PatchComponent::ResidPre => f.write_str("resid_pre"),
            PatchComponent::ResidMid => f.write_str("resid_mid"),
            PatchComponent::AttnOut => f.write_str("attn_out"),
            PatchComponent::MlpOut => f.write_str("mlp_out"),
            PatchComponent::Head(None) => f.write_str("head"),
            PatchComponent::Head(Some(h)) => write!(f, "head {h}"),
        }
    }
}

impl Display for Positions {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Positions::Last => "LAST",
            Positions::All => "ALL",
        })
    }
}
impl Display for ModelRef {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            ModelRef::Current => f.write_str("CURRENT"),
            ModelRef::Path(p) => f.write_str(&quote(p)),
        }
    }
}
impl Display for CompileTarget {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CompileTarget::Vindex => "VINDEX",
            CompileTarget::Package => "PACKAGE",
            CompileTarget::Gguf => "GGUF",
        })
    }
}
impl Display for ExtractShape {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ExtractShape::Graph => "GRAPH",
            ExtractShape::Bank => "BANK",
        })
    }
}

impl Display for ExtractFormat {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ExtractFormat::Vindex3 => "VINDEX3",
            ExtractFormat::Package => "PACKAGE",
        })
    }
}
impl Display for Encoding {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Encoding::Source => "SOURCE",
            Encoding::F32 => "F32",
            Encoding::F16 => "F16",
            Encoding::Bf16 => "BF16",
            Encoding::Q8_0 => "Q8_0",
        })
    }
}
impl Display for ShowWhat {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ShowWhat::Models => "MODELS",
            ShowWhat::Backends => "BACKENDS",
            ShowWhat::Architectures => "ARCHITECTURES",
            ShowWhat::Layers => "LAYERS",
            ShowWhat::Components => "COMPONENTS",
            ShowWhat::Representations => "REPRESENTATIONS",
            ShowWhat::Tensors => "TENSORS",
            ShowWhat::Profiles => "PROFILES",
            ShowWhat::Patches => "PATCHES",
            ShowWhat::Tables => "TABLES",
            ShowWhat::Package => "PACKAGE",
            ShowWhat::Capabilities => "CAPABILITIES",
            ShowWhat::Steering => "STEERING",
        })
    }
}
impl Display for Ident {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// Binding strength for parenthesisation: OR < AND < NOT < predicate < `+ -` < `* / %`
/// < `||` < unary minus < atom.
fn prec(e: &Expr) -> u8 {
    match e.kind {
        ExprKind::Or(_) => 1,
        ExprKind::And(_) => 2,
        ExprKind::Not(_) => 3,
        ExprKind::Compare { .. }
        | ExprKind::Like { .. }
        | ExprKind::InList { .. }
        | ExprKind::Between { .. }
        | ExprKind::IsNull { .. } => 4,
        ExprKind::Arith {
            op: ArithOp::Add | ArithOp::Sub,
            ..
        } => 5,
        ExprKind::Arith {
            op: ArithOp::Concat,
            ..
        } => 7,
        ExprKind::Arith { .. } => 6,
        ExprKind::Neg(_) => 8,
        ExprKind::InSubquery { .. } => 4,
        ExprKind::Column(_)
        | ExprKind::Literal(_)
        | ExprKind::Aggregate { .. }
        | ExprKind::Call { .. }
        | ExprKind::Case { .. }
        | ExprKind::Cast { .. }
        | ExprKind::Subquery(_) => 9,
    }
}

/// Writes `e`, parenthesised when it binds weaker than `min`.
fn write_at(f: &mut Formatter<'_>, e: &Expr, min: u8) -> fmt::Result {
    if prec(e) < min {
        write!(f, "({e})")
    } else {
        write!(f, "{e}")
    }
}

impl Display for Expr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let not = |n: bool| if n { "NOT " } else { "" };
        match &self.kind {
            ExprKind::Column(c) => write!(f, "{c}"),
            ExprKind::Literal(v) => write!(f, "{v}"),
            ExprKind::Compare { op, left, right } => {
                write_at(f, left, 5)?;
                write!(f, " {} ", op.symbol())?;
                write_at(f, right, 5)
            }
            ExprKind::Like {
                expr,
                pattern,
                negated,
            } => {
                write_at(f, expr, 5)?;
                write!(f, " {}LIKE ", not(*negated))?;
                write_at(f, pattern, 5)
            }
            ExprKind::InList {
                expr,
                list,
                negated,
            } => {
                write_at(f, expr, 5)?;
                write!(f, " {}IN (", not(*negated))?;
                for (i, e) in list.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write_at(f, e, 5)?;
                }
                f.write_str(")")
            }
            ExprKind::Between {
                expr,
                low,
                high,
                negated,
            } => {
                write_at(f, expr, 5)?;
                write!(f, " {}BETWEEN ", not(*negated))?;
                write_at(f, low, 5)?;
                f.write_str(" AND ")?;
                write_at(f, high, 5)
            }
            ExprKind::IsNull { expr, negated } => {
                write_at(f, expr, 5)?;
                write!(f, " IS {}NULL", not(*negated))
            }
            ExprKind::Not(e) => {
                f.write_str("NOT ")?;
                write_at(f, e, 3)
            }
            ExprKind::Arith { op, left, right } => {
                let p = prec(self);
                write_at(f, left, p)?;
                write!(f, " {} ", op.symbol())?;
                write_at(f, right, p + 1)
            }
            ExprKind::Neg(e) => {
                // `-(5)` and `-(-x)`: a bare `-5` reads back as a literal, `--` as a comment.
                let literal_or_neg = matches!(
                    e.kind,
                    ExprKind::Literal(Value::Int(_) | Value::Float(_)) | ExprKind::Neg(_)
                );
                if literal_or_neg {
                    write!(f, "-({e})")
                } else {
                    f.write_str("-")?;
                    write_at(f, e, 9)
                }
            }
            ExprKind::Aggregate {
                func,
                arg,
                distinct,
            } => {
                write!(f, "{}(", func.name())?;
                if *distinct {
                    f.write_str("DISTINCT ")?;
                }
                match arg {
                    Some(a) => write!(f, "{a}")?,
                    None => f.write_str("*")?,
                }
                f.write_str(")")
            }
            ExprKind::Call { func, args } => {
                write!(f, "{}(", func.name())?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str(")")
            }
            ExprKind::Case {
                operand,
                whens,
                otherwise,
            } => {
                f.write_str("CASE")?;
                if let Some(o) = operand {
                    write!(f, " {o}")?;
                }
                for (w, t) in whens {
                    write!(f, " WHEN {w} THEN {t}")?;
                }
                if let Some(o) = otherwise {
                    write!(f, " ELSE {o}")?;
                }
                f.write_str(" END")
            }
            ExprKind::Cast { expr, to } => write!(f, "CAST({expr} AS {})", to.name()),
            ExprKind::InSubquery {
                expr,
                query,
                negated,
            } => {
                write_at(f, expr, 5)?;
                write!(f, " {}IN (", not(*negated))?;
                select(f, query)?;
                f.write_str(")")
            }
            ExprKind::Subquery(q) => {
                f.write_str("(")?;
                select(f, q)?;
                f.write_str(")")
            }
            ExprKind::And(v) | ExprKind::Or(v) => {
                let (kw, min) = if matches!(self.kind, ExprKind::And(_)) {
                    (" AND ", 3)
                } else {
                    (" OR ", 2)
                };
                for (i, e) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(kw)?;
                    }
                    // A nested chain of the same kind keeps its parentheses so the
                    // tree shape survives the round trip.
                    write_at(f, e, min)?;
                }
                Ok(())
            }
        }
    }
}

fn select(f: &mut Formatter<'_>, s: &Select) -> fmt::Result {
    f.write_str("SELECT ")?;
    if s.distinct.is_some() {
        f.write_str("DISTINCT ")?;
    }
    match &s.columns.value {
        SelectList::All => f.write_str("*")?,
        SelectList::Items(items) => {
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{}", item.expr)?;
                if let Some(a) = &item.alias {
                    write!(f, " AS {a}")?;
                }
            }
        }
    }
    if let Some(from) = &s.from {
        f.write_str(" FROM ")?;
        from_item(f, from)?;
    }
    filter(f, &s.filter)?;
    if let Some(g) = &s.group_by {
        f.write_str(" GROUP BY ")?;
        for (i, e) in g.value.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write_at(f, e, 5)?;
        }
    }
    if let Some(h) = &s.having {
        write!(f, " HAVING {}", h.value)?;
    }
    if let Some(o) = &s.order_by {
        f.write_str(" ORDER BY ")?;
        for (i, item) in o.value.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write_at(f, &item.expr, 5)?;
            match item.direction {
                Some(SortDirection::Asc) => f.write_str(" ASC")?,
                Some(SortDirection::Desc) => f.write_str(" DESC")?,
                None => {}
            }
        }
    }
    opt_int(f, "LIMIT", &s.limit)?;
    opt_int(f, "OFFSET", &s.offset)
}

fn from_item(f: &mut Formatter<'_>, item: &FromItem) -> fmt::Result {
    let alias = |f: &mut Formatter<'_>, a: &Option<Ident>| match a {
        Some(a) => write!(f, " AS {a}"),
        None => Ok(()),
    };
    match item {
        FromItem::Table { table, alias: a } => {
            write!(f, "{}", table.value)?;
            alias(f, a)
        }
        FromItem::Statement {
            statement,
            alias: a,
            ..
        } => {
            write!(f, "({statement})")?;
            alias(f, a)
        }
        FromItem::Join {
            left,
            right,
            kind,
            on,
            using,
            ..
        } => {
            from_item(f, left)?;
            f.write_str(match kind {
                JoinKind::Inner => " JOIN ",
                JoinKind::Left => " LEFT JOIN ",
                JoinKind::Cross => " CROSS JOIN ",
            })?;
            // A join on the right nests: keep its shape with parentheses? SQL joins nest
            // to the left only, so the right side is always a single item.
            from_item(f, right)?;
            if let Some(on) = on {
                write!(f, " ON {on}")?;
            }
            if !using.is_empty() {
                f.write_str(" USING (")?;
                for (i, u) in using.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{u}")?;
                }
                f.write_str(")")?;
            }
            Ok(())
        }
    }
}

fn steering(f: &mut Formatter<'_>, s: &SteeringSpec) -> fmt::Result {
    let list = |f: &mut Formatter<'_>, v: &[Spanned<String>]| -> fmt::Result {
        f.write_str("(")?;
        for (i, t) in v.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", Q(&t.value))?;
        }
        f.write_str(")")
    };
    match &s.source {
        SteeringSource::File(p) => write!(f, "{}", Q(&p.value))?,
        SteeringSource::Difference { positive, negative } => {
            list(f, positive)?;
            f.write_str(" MINUS ")?;
            list(f, negative)?;
        }
    }
    opt_float(f, "SCALE", &s.scale)?;
    layers(f, &s.layers)
}

fn layers(f: &mut Formatter<'_>, l: &Option<Spanned<LayerSpec>>) -> fmt::Result {
    if let Some(l) = l {
        write!(f, " LAYERS {}", l.value)?;
    }
    Ok(())
}

fn opt_int(f: &mut Formatter<'_>, kw: &str, v: &Option<Spanned<i64>>) -> fmt::Result {
    if let Some(v) = v {
        write!(f, " {kw} {}", v.value)?;
    }
    Ok(())
}

fn opt_float(f: &mut Formatter<'_>, kw: &str, v: &Option<Spanned<f64>>) -> fmt::Result {
    if let Some(v) = v {
        write!(f, " {kw} {}", float(v.value))?;
    }
    Ok(())
}

fn opt_str(f: &mut Formatter<'_>, kw: &str, v: &Option<Spanned<String>>) -> fmt::Result {
    if let Some(v) = v {
        write!(f, " {kw} {}", Q(&v.value))?;
    }
    Ok(())
}

fn filter(f: &mut Formatter<'_>, w: &Option<Spanned<Expr>>) -> fmt::Result {
    if let Some(w) = w {
        write!(f, " WHERE {}", w.value)?;
    }
    Ok(())
}

impl Display for Statement {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind)
    }
}

impl Display for StatementKind {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            StatementKind::Use(u) => {
                match &u.source {
                    UseSource::Path(p) => write!(f, "USE {}", Q(&p.value))?,
                    UseSource::Model(m) => write!(f, "USE MODEL {}", Q(&m.value))?,
                }
                layers(f, &u.layers)?;
                opt_str(f, "PROFILE", &u.profile)?;
                if let Some(b) = &u.backend {
                    write!(f, " BACKEND {}", b.value.name())?;
                }
                Ok(())
            }
            StatementKind::Infer(i) => {
                write!(f, "INFER {}", Q(&i.prompt.value))?;
                opt_int(f, "TOP", &i.top)?;
                opt_int(f, "GENERATE", &i.generate)
            }
            StatementKind::Generate(g) => {
                write!(f, "GENERATE {}", Q(&g.prompt.value))?;
                opt_int(f, "MAX", &g.max)?;
                opt_float(f, "TEMPERATURE", &g.temperature)?;
                opt_int(f, "TOP_K", &g.top_k)?;
                opt_float(f, "TOP_P", &g.top_p)?;
                opt_int(f, "SEED", &g.seed)?;
                if let Some(stop) = &g.stop {
                    f.write_str(" STOP ")?;
                    for (i, s) in stop.value.iter().enumerate() {
                        if i > 0 {
                            f.write_str(", ")?;
                        }
                        write!(f, "{}", Q(s))?;
                    }
                }
                match g.constraint.as_ref().map(|c| &c.value) {
                    Some(OutputConstraint::Schema(s)) => write!(f, " SCHEMA {}", Q(s))?,
                    Some(OutputConstraint::Grammar(s)) => write!(f, " GRAMMAR {}", Q(s))?,
                    None => {}
                }
                opt_float(f, "REPEAT_PENALTY", &g.repeat_penalty)?;
                opt_float(f, "FREQUENCY_PENALTY", &g.frequency_penalty)?;
                opt_float(f, "PRESENCE_PENALTY", &g.presence_penalty)
            }
            StatementKind::Walk(w) => {
                write!(f, "WALK {}", Q(&w.prompt.value))?;
                opt_int(f, "TOP", &w.top)?;
                layers(f, &w.layers)?;
                if let Some(m) = &w.mode {
                    write!(f, " MODE {}", m.value)?;
                }
                Ok(())
            }
            StatementKind::Describe(d) => {
                write!(f, "DESCRIBE {}", Q(&d.entity.value))?;
                match d.scope.as_ref().map(|s| s.value) {
                    Some(DescribeScope::AtLayer(n)) => write!(f, " AT LAYER {n}")?,
                    Some(DescribeScope::Layers(l)) => write!(f, " LAYERS {l}")?,
                    None => {}
                }
                if let Some(d) = &d.detail {
                    write!(f, " {}", d.value)?;
                }
                Ok(())
            }
            StatementKind::Select(s) => select(f, s),
            StatementKind::Trace(t) => {
                write!(f, "TRACE {}", Q(&t.prompt.value))?;
                opt_str(f, "FOR", &t.target)?;
                if t.decompose.is_some() {
                    f.write_str(" DECOMPOSE")?;
                }
                layers(f, &t.layers)?;
                if let Some(p) = &t.positions {
                    write!(f, " POSITIONS {}", p.value)?;
                }
                opt_str(f, "SAVE", &t.save)
            }
            StatementKind::Patch(p) => {
                write!(f, "PATCH {}", Q(&p.prompt.value))?;
                match &p.corruption.value {
                    Corruption::Prompt(clean) => write!(f, " FROM {}", Q(&clean.value))?,
                    Corruption::Noise {
                        subject,
                        scale,
                        seed,
                    } => {
                        write!(f, " NOISE ON {}", Q(&subject.value))?;
                        opt_float(f, "SCALE", scale)?;
                        opt_int(f, "SEED", seed)?;
                    }
                }
                layers(f, &p.layers)?;
                match p.positions.as_ref().map(|x| x.value) {
                    None => {}
                    Some(PatchPositions::One(n)) => write!(f, " POSITION {n}")?,
                    Some(PatchPositions::All) => f.write_str(" POSITIONS ALL")?,
                    Some(PatchPositions::Last) => f.write_str(" POSITIONS LAST")?,
                    Some(PatchPositions::Together) => f.write_str(" POSITIONS TOGETHER")?,
                }
                if let Some(c) = &p.component {
                    write!(f, " COMPONENT {}", c.value)?;
                }
                match p.metric.as_ref().map(|m| &m.value) {
                    None => {}
                    Some(PatchMetric::LogitDiff(a, b)) => {
                        write!(f, " METRIC LOGIT_DIFF({}, {})", Q(a), Q(b))?
                    }
                    Some(PatchMetric::Logit(a)) => write!(f, " METRIC LOGIT({})", Q(a))?,
                    Some(PatchMetric::Prob(a)) => write!(f, " METRIC PROB({})", Q(a))?,
                }
                if let Some(m) = &p.method {
                    write!(f, " BY {}", m.value.to_string().to_uppercase())?;
                }
                if let Some(w) = &p.window {
                    write!(f, " WINDOW {}", w.value)?;
                }
                opt_str(f, "SAVE", &p.save)
            }
            StatementKind::Insert(i) => {
                write!(f, "INSERT INTO {}", i.table.value)?;
                if let Some(file) = &i.file {
                    write!(f, " FROM {}", Q(&file.value))?;
                } else if let Some(q) = &i.select {
                    f.write_str(" ")?;
                    select(f, q)?;
                } else {
                    f.write_str(" (")?;
                    write_list(f, &i.columns)?;
                    f.write_str(") VALUES ")?;
                }
                for (n, row) in i.rows.iter().enumerate() {
                    if n > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str("(")?;
                    for (k, v) in row.value.iter().enumerate() {
                        if k > 0 {
                            f.write_str(", ")?;
                        }
                        write!(f, "{}", v.value)?;
                    }
                    f.write_str(")")?;
                }
                if let Some(l) = &i.at_layer {
                    write!(f, " AT LAYER {}", l.value)?;
                }
                opt_float(f, "ALPHA", &i.alpha)?;
                opt_float(f, "CONFIDENCE", &i.confidence)
            }
            StatementKind::EvaluateEdits(e) => {
                write!(f, "EVALUATE EDITS FROM {}", Q(&e.facts.value))?;
                opt_int(f, "SEQUENTIAL BATCH", &e.batch)?;
                if e.per_fact.is_some() {
                    f.write_str(" PER FACT")?;
                }
                opt_int(f, "LIMIT", &e.limit)?;
                if let Some(l) = &e.at_layer {
                    write!(f, " AT LAYER {}", l.value)?;
                }
                opt_float(f, "ALPHA", &e.alpha)?;
                opt_str(f, "SAVE", &e.save)
            }
            StatementKind::AnalyzeFeatures(a) => {
                write!(f, "ANALYZE FEATURES FROM {}", Q(&a.corpus.value))?;
                if let Some(l) = &a.layers {
                    write!(f, " LAYERS {}", l.value)?;
                }
                opt_int(f, "TOP", &a.top)
            }
            StatementKind::Delete(d) => {
                write!(f, "DELETE FROM {}", d.table.value)?;
                filter(f, &d.filter)
            }
            StatementKind::Update(u) => {
                write!(f, "UPDATE {} SET ", u.table.value)?;
                for (i, a) in u.assignments.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{} = {}", a.column, a.value.value)?;
                }
                filter(f, &u.filter)
            }
            StatementKind::BeginPatch(p) => write!(f, "BEGIN PATCH {}", Q(&p.value)),
            StatementKind::SavePatch(None) => f.write_str("SAVE PATCH"),
            StatementKind::SavePatch(Some(p)) => write!(f, "SAVE PATCH {}", Q(&p.value)),
            StatementKind::Set(s) => match s.value {
                Setting::Backend(b) => write!(f, "SET backend = {}", Q(b.name())),
            },
            StatementKind::SetSteering(None) => f.write_str("SET STEERING = OFF"),
            StatementKind::SetSteering(Some(s)) => {
                f.write_str("SET STEERING = ")?;
                steering(f, &s.value)
            }
            StatementKind::SaveSteering(p) => write!(f, "SAVE STEERING {}", Q(&p.value)),
            StatementKind::Steered {
                steering: s,
                statement,
            } => {
                f.write_str("WITH STEERING ")?;
                steering(f, &s.value)?;
                write!(f, " {statement}")
            }
            StatementKind::ApplyPatch(p) => write!(f, "APPLY PATCH {}", Q(&p.value)),
            StatementKind::RemovePatch(p) => write!(f, "REMOVE PATCH {}", Q(&p.value)),
            StatementKind::Diff(d) => {
                write!(f, "DIFF {}", d.left.value)?;
                if let Some(r) = &d.right {
                    write!(f, " {}", r.value)?;
                }
                if let Some(l) = &d.layer {
                    write!(f, " LAYER {}", l.value)?;
                }
                if let Some(l) = &d.limit {
                    write!(f, " LIMIT {}", l.value)?;
                }
                if d.physical.is_some() {
                    f.write_str(" PHYSICAL")?;
                }
                if let Some(p) = &d.into_patch {
                    write!(f, " INTO PATCH {}", Q(&p.value))?;
                }
                Ok(())
            }
            StatementKind::Compile(c) => {
                write!(
                    f,
                    "COMPILE {} INTO {} {}",
                    c.source.value,
                    c.target.value,
                    Q(&c.output.value)
                )?;
                if let Some(x) = &c.model_id {
                    write!(f, " MODEL_ID {}", Q(&x.value))?;
                }
                if let Some(x) = &c.source_revision {
                    write!(f, " SOURCE_REVISION {}", Q(&x.value))?;
                }
                Ok(())
            }
            StatementKind::Extract(e) => {
                write!(
                    f,
                    "EXTRACT MODEL {} INTO {}",
                    Q(&e.source.value),
                    Q(&e.output.value)
                )?;
                if let Some(x) = &e.format {
                    write!(f, " FORMAT {}", x.value)?;
                }
                if let Some(x) = &e.shape {
                    write!(f, " SHAPE {}", x.value)?;
                }
                if let Some(x) = &e.group {
                    write!(f, " GROUP {}", x.value)?;
                }
                if let Some(x) = &e.encoding {
                    write!(f, " ENCODING {}", x.value)?;
                }
                if let Some(x) = &e.model_id {
                    write!(f, " MODEL_ID {}", Q(&x.value))?;
                }
                if let Some(x) = &e.source_revision {
                    write!(f, " SOURCE_REVISION {}", Q(&x.value))?;
                }
                for p in &e.projectors {
                    write!(f, " PROJECTOR {}", Q(&p.value))?;
                }
                if e.labels.is_some() {
                    f.write_str(" WITH LABELS")?;
                }
                layers(f, &e.layers)
            }
            StatementKind::Represent(r) => {
                match &r.target.value {
                    RepresentTarget::Labels => f.write_str("REPRESENT LABELS")?,
                    RepresentTarget::All => f.write_str("REPRESENT ALL")?,
                    RepresentTarget::Object(o) => write!(f, "REPRESENT {}", Q(o))?,
                }
                if r.ffn.is_some() {
                    f.write_str(" FFN")?;
                }
                if let Some(e) = &r.encoding {
                    write!(f, " AS {}", e.value)?;
                }
                match (&r.target.value, &r.container) {
                    (RepresentTarget::Labels, Some(c)) => write!(f, " {}", Q(&c.value)),
                    (_, c) => opt_str(f, "INTO", c),
                }
            }
            StatementKind::Compact(c) => {
                write!(f, "COMPACT {}", Q(&c.container.value))?;
                opt_str(f, "INTO", &c.into)
            }
            StatementKind::Verify(v) => {
                f.write_str("VERIFY")?;
                if let Some(t) = &v.target {
                    write!(f, " {}", Q(&t.value))?;
                }
                opt_str(f, "AGAINST", &v.against)
            }
            StatementKind::Show(s) => {
                write!(f, "SHOW {}", s.what.value)?;
                if let Some(c) = &s.container {
                    write!(f, " {}", Q(&c.value))?;
                }
                opt_str(f, "LIKE", &s.like)
            }
            StatementKind::Artifact(a) => match (a.what, &a.object) {
                (ArtifactWhat::DescribeObject, Some(o)) => write!(
                    f,
                    "DESCRIBE OBJECT {} {}",
                    Q(&a.container.value),
                    Q(&o.value)
                ),
                (ArtifactWhat::DescribeObject, None) => {
                    write!(f, "DESCRIBE OBJECT {}", Q(&a.container.value))
                }
                (ArtifactWhat::Inspect, _) => write!(f, "INSPECT {}", Q(&a.container.value)),
                (ArtifactWhat::Precision, _) => write!(f, "PRECISION {}", Q(&a.container.value)),
            },
            StatementKind::Stats => f.write_str("STATS"),
            StatementKind::Tokenize(t) => write!(f, "TOKENIZE {}", Q(&t.value)),
            StatementKind::Explain(inner) => write!(f, "EXPLAIN {inner}"),
            StatementKind::ExplainPlan(inner) => write!(f, "EXPLAIN PLAN {inner}"),
            StatementKind::ExplainAnalyze(inner) => write!(f, "EXPLAIN ANALYZE {inner}"),
            StatementKind::DescribeTable(t) => write!(f, "DESCRIBE TABLE {}", t.value.name()),
            StatementKind::RunStage(r) => {
                match &r.input {
                    StageSource::Prompt(p) => write!(f, "RUN STAGE {}", Q(&p.value))?,
                    StageSource::File(h) => write!(f, "RUN STAGE FROM {}", Q(&h.value))?,
                }
                write!(f, " INTO {}", Q(&r.into.value))
            }
            StatementKind::InferFrom(i) => {
                write!(f, "INFER FROM {}", Q(&i.file.value))?;
                opt_int(f, "TOP", &i.top)
            }
        }
    }
}

fn write_list(f: &mut Formatter<'_>, items: &[Ident]) -> fmt::Result {
    for (i, c) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{c}")?;
    }
    Ok(())
}
