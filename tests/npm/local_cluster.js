// Helpers shared by the tests that drive a local `spar cluster` process.
'use strict';

const fs = require('fs');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The trimmed contents of `file` once a daemon has written it; fails when the
// child process exits first or after `seconds`.
async function waitForFile(file, child, seconds) {
  for (let i = 0; i < seconds * 10; i++) {
    if (fs.existsSync(file) && fs.readFileSync(file, 'utf8').trim() !== '') return fs.readFileSync(file, 'utf8').trim();
    if (child.exitCode !== null) throw new Error(`spar cluster exited (${child.exitCode}) before ${file} appeared`);
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${file}`);
}

module.exports = { sleep, waitForFile };
