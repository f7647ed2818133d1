//! # lql-planner: AST → LogicalPlan (bound against a Catalog) → PhysicalPlan.
