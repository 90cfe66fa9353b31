//! What `whimbrel local` takes from `template.yaml` (the one place the
//! event source mapping settings, function timeouts, async invoke settings
//! and the schedule target are written down, the same file `sam deploy`
//! uses), read by the one reader the simulation also uses:
//! [`whimbrel_aws_model::template`].

pub use whimbrel_aws_model::template::{
    AsyncConfig, FunctionConfig, StartingPosition, StreamMapping, Template,
};
