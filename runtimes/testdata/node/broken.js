require('this-module-does-not-exist'); // the runtime must exit naming this file
