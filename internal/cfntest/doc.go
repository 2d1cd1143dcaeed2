// Package cfntest tests the CloudFormation template
// (cloudformation/dynalimit.yaml); it has no code of its own but its tests.
//
//   - cfn-lint, pinned with every dependency's hash in requirements.txt, is
//     installed into .cache/cfn-lint/venv (internal/pyvenv) and must find
//     nothing;
//   - the template is parsed with goformation, keeping references: every
//     Ref, Fn::GetAtt, Fn::Sub variable and Fn::If condition names a
//     parameter, resource, pseudo parameter or condition, and the table is
//     what admin.CreateTable asks DynamoDB for (recorded on the fake);
//   - a recording proxy in front of DynamoDB Local notes every call (its
//     IAM action, the table or index, the leading keys) while a serve-like
//     path (NewStore, Warm, decisions of every kind, a shard doubling
//     forced by throttling, Status) and each admin command (admin.Run) run;
//     each policy must allow exactly its role's calls and grant nothing
//     they do not use, and removing any action from the template fails;
//   - each namespace-scoped policy's dynamodb:LeadingKeys condition is
//     evaluated with the principal tag of namespace A: A's calls are
//     allowed, the same calls on namespace B and on near misses (nA-other/)
//     are denied, and _/SYSTEM# is readable, never writable.
//
// The tests that need DynamoDB Local skip under -short, as the other heavy
// tests do; cfn-lint and the template checks run always.
package cfntest
