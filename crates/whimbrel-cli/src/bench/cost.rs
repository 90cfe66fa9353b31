//! The cost model of `whimbrel bench`: what one run consumed (measured:
//! capacity units, invocations, handler durations) priced at list prices,
//! per million activities, beside Step Functions for the same workflow.
//!
//! List prices (USD, us-east-1, on-demand; November 2026):
//! * DynamoDB on-demand: $0.625 per million write request units, $0.125
//!   per million read request units (aws.amazon.com/dynamodb/pricing/on-demand).
//!   Reads of DynamoDB Streams by a Lambda event source mapping are free.
//! * Lambda, arm64: $0.20 per million requests, $0.0000133334 per GB-second
//!   (aws.amazon.com/lambda/pricing).
//! * Step Functions Standard: $25.00 per million state transitions; Express:
//!   $1.00 per million requests and $0.00001667 per GB-second, billed in
//!   100 ms and 64 MB steps (aws.amazon.com/step-functions/pricing).

use std::collections::BTreeMap;

use whimbrel_core::store::Capacity;

/// USD per million write request units.
pub const WRITE_REQUEST_UNIT: f64 = 0.625;
/// USD per million read request units.
pub const READ_REQUEST_UNIT: f64 = 0.125;
/// USD per million Lambda requests.
pub const LAMBDA_REQUEST: f64 = 0.20;
/// USD per GB-second of Lambda on arm64.
pub const LAMBDA_GB_SECOND_ARM64: f64 = 0.000_013_333_4;
/// USD per million Step Functions Standard state transitions.
pub const SFN_STANDARD_TRANSITION: f64 = 25.0;
/// USD per million Step Functions Express requests.
pub const SFN_EXPRESS_REQUEST: f64 = 1.0;
/// USD per GB-second of Step Functions Express.
pub const SFN_EXPRESS_GB_SECOND: f64 = 0.000_016_67;

/// What one run consumed, summed over every function.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    /// Activities of the workflow.
    pub activities: u64,
    /// Capacity consumed, by `"{op} {table}"` / `"{op} {table}/{index}"`.
    pub capacity: BTreeMap<String, Capacity>,
    /// Lambda requests billed to the engine (its functions' invocations,
    /// without the schedule's).
    pub engine_invocations: u64,
    /// Sum over every invocation of every function (the activities' too)
    /// of its handler duration rounded up to 1 ms, seconds.
    pub billed_seconds: f64,
    /// Memory of every function, MB (the template's `MemorySize`).
    pub memory_mb: u32,
    /// Workflow wall time, seconds (Express duration proxy).
    pub wall_seconds: f64,
}

/// Cost per million activities, USD, by part.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bill {
    /// DynamoDB writes (tables and GSIs).
    pub writes: f64,
    /// DynamoDB reads.
    pub reads: f64,
    /// Lambda requests.
    pub requests: f64,
    /// Lambda GB-seconds.
    pub duration: f64,
    /// Step Functions Standard for the same workflow.
    pub sfn_standard: f64,
    /// Step Functions Express for the same workflow.
    pub sfn_express: f64,
}

impl Bill {
    /// Whimbrel's total.
    pub fn total(&self) -> f64 {
        self.writes + self.reads + self.requests + self.duration
    }
}

impl Usage {
    /// Write request units per activity.
    pub fn wru(&self) -> f64 {
        self.capacity.values().map(|c| c.write).sum::<f64>() / self.per()
    }

    /// Read request units per activity.
    pub fn rru(&self) -> f64 {
        self.capacity.values().map(|c| c.read).sum::<f64>() / self.per()
    }

    fn per(&self) -> f64 {
        self.activities.max(1) as f64
    }

    /// The bill per million activities. Step Functions is priced for the
    /// same workflow: Standard as one Task state per activity plus the
    /// start and the end, Express as one request per workflow running for
    /// the measured wall time at its 64 MB minimum.
    pub fn bill(&self) -> Bill {
        let m = 1_000_000.0 / self.per();
        let gb = f64::from(self.memory_mb) / 1024.0;
        let express_seconds = (self.wall_seconds * 10.0).ceil() / 10.0;
        Bill {
            writes: self.wru() * WRITE_REQUEST_UNIT,
            reads: self.rru() * READ_REQUEST_UNIT,
            requests: self.engine_invocations as f64 / self.per() * LAMBDA_REQUEST,
            duration: self.billed_seconds * gb * LAMBDA_GB_SECOND_ARM64 * m,
            sfn_standard: (self.activities + 2) as f64 / self.per() * SFN_STANDARD_TRANSITION,
            sfn_express: (SFN_EXPRESS_REQUEST / 1_000_000.0
                + express_seconds * (64.0 / 1024.0) * SFN_EXPRESS_GB_SECOND)
                * m,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bill_prices_what_was_measured() {
        // 10 activities; 60 WRU and 20 RRU in all; 30 engine invocations;
        // 2 s of handlers at 256 MB; 1.23 s wall.
        let mut capacity = BTreeMap::new();
        capacity.insert(
            "UpdateItem whimbrel_activity_exec".into(),
            Capacity {
                read: 0.0,
                write: 60.0,
            },
        );
        capacity.insert(
            "GetItem whimbrel_workflow_exec".into(),
            Capacity {
                read: 20.0,
                write: 0.0,
            },
        );
        let u = Usage {
            activities: 10,
            capacity,
            engine_invocations: 30,
            billed_seconds: 2.0,
            memory_mb: 256,
            wall_seconds: 1.23,
        };
        let b = u.bill();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(b.writes, 6.0 * 0.625), "{b:?}");
        assert!(close(b.reads, 2.0 * 0.125), "{b:?}");
        assert!(close(b.requests, 3.0 * 0.20), "{b:?}");
        // 2 s × 0.25 GB per 10 activities = 50,000 GB-s per million.
        assert!(close(b.duration, 50_000.0 * 0.000_013_333_4), "{b:?}");
        assert!(close(b.sfn_standard, 1.2 * 25.0), "{b:?}");
        // Express: 1.3 s × 64 MB per workflow of 10.
        let express = (1.0 / 1e6 + 1.3 * 0.0625 * 0.000_016_67) * 100_000.0;
        assert!(close(b.sfn_express, express), "{b:?}");
        assert!(close(
            b.total(),
            b.writes + b.reads + b.requests + b.duration
        ));
    }
}
